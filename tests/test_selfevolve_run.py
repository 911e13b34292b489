"""Self-evolution for real: BM25 over the training-source corpus, accelerate on CPU, solvers that sample, train and resume.

SmolLM2-135M writes no well-formed `<question>`/`<answer>` proposal (measured: format 0 over whole
cpu-smoke runs), so nothing would be admitted and no solver would ever score or train. The tests
about admission, scoring and provenance therefore script the proposer's text, and only that: the
solvers answer with a real model, train on what they answered, and are checkpointed and resumed.
The CLI run and MSV use SmolLM2-135M; the CrossFit routing runs (4 roles, two checkpoints) use the
tiny random Llama of conftest.py, whose checkpoints are megabytes instead of 6.5 GB each.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cfbench.harness.protocol import cut_at_stop
from cfbench.training.core.answers import matches
from cfbench.training.selfevolve.sources import FOLDS_FILE, fold_of
from cfbench.training.trainer import train
from cfbench.training.treatments import load_config
from tests.scripted import written

pytestmark = pytest.mark.slow  # Every test here trains a self-evolution run or loads SmolLM2.


class ScriptedProposer:
    """Searches the source's title n-1 times, then asks which article holds a quote from the source."""

    def __init__(self, tokens) -> None:
        self.tokens = tokens

    def chat_prompt(self, user: str) -> str:
        return self.tokens.chat_prompt(user)

    def truncate(self, text: str, max_tokens: int) -> str:
        return self.tokens.truncate(text, max_tokens)

    def generate(self, prompts, max_new_tokens, max_context_tokens, stop):
        return [written(cut_at_stop(self.propose(p))) for p in prompts]

    @staticmethod
    def propose(context: str) -> str:
        found = re.search(r"Search (\d+) times", context)
        hops = 1 if "without searching" in context else 2 if "Search once" in context else int(found.group(1)) + 1
        title, text = re.search(r"Source document: \(Title: (.*?)\) (.*)", context).groups()
        if context.count("Doc 1(Title:") < hops - 1:
            return f"<search> {title} </search>"
        title, words = title.strip(chr(34)), text.split()
        quote = next(
            (" ".join(words[i : i + 8]) for i in range(0, len(words), 8) if title.lower() not in " ".join(words[i : i + 8]).lower()), ""
        )
        return f"<question> Which article says '{quote}'? </question> <answer> {title} </answer>"


def config(treatment: str, steps: int, save_every: int, **flags) -> dict:
    """The cpu-smoke config with 2 source tasks per step (4 in the shipped one) to keep the suite short."""
    return load_config(treatment, "cpu-smoke", steps, save_every, **flags) | {"prompts_per_step": 2}


def scripted(tokens):
    return lambda step: ScriptedProposer(tokens)


def audit(run) -> list[dict]:
    return [
        json.loads(line)
        for p in sorted((run / "audit").glob("step-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
        for line in p.read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def tokens():
    from cfbench.harness.backends.tokens import PromptTokens

    return PromptTokens.load("smollm2-135m")


@pytest.fixture(scope="module")
def crossfit_run(tmp_path_factory, request, tokens, tiny_llama):
    """CrossFit for one round and the next round's proposer step, stopped after step 2 and resumed (kept if a test fails)."""
    out = tmp_path_factory.mktemp("se") / "crossfit"
    train(config("crossfit", 2, 2) | {"model": str(tiny_llama)}, out, proposer_engine=scripted(tokens))
    folds = (out / FOLDS_FILE).read_bytes()
    train(config("crossfit", 4, 2) | {"model": str(tiny_llama)}, out, resume=True, proposer_engine=scripted(tokens))
    assert (out / FOLDS_FILE).read_bytes() == folds  # decided once, reused on restart
    failed = request.session.testsfailed
    yield out
    if request.session.testsfailed == failed:
        shutil.rmtree(out)


def test_folds_are_per_source_and_stable_across_rounds_and_restarts(crossfit_run):
    rows = audit(crossfit_run)
    assert [r["step"] for r in rows] == [1] * 2 + [2] * 2 + [3] * 2 + [4] * 2 and {r["round"] for r in rows} == {1, 2}
    stored = json.loads((crossfit_run / FOLDS_FILE).read_text())["folds"]
    assert len(stored) == 4 and all(stored[r["source_id"]] == r["fold"] == fold_of(r["source_id"]) for r in rows)


def test_crossfit_never_scores_a_question_with_a_solver_trained_on_its_fold(crossfit_run):
    rows = audit(crossfit_run)
    scored = [r for r in rows if r["admitted"]]
    assert len(scored) >= 6 and scored == [r for r in rows if not r["parse_error"]]  # no MSV: every strict proposal is admitted
    for r in scored:
        assert r["scorer"] == f"aux-{1 - r['fold']}" and len(r["solver_responses"]) == 5
        assert r["fold"] not in r["scorer_provenance"]["trained_on_folds"] and not r["scorer_provenance"]["trained_on_this_source"]
        assert r["k"] == sum(matches(x["prediction"], r["adopted_label"]) for x in r["solver_responses"])
    late = [r for r in scored if r["step"] == 4]
    assert any(r["scorer_provenance"]["trained_on_folds"] for r in late)  # the check bites: the scorers had trained by then
    provenance = json.loads((crossfit_run / "checkpoint-4" / "cfbench_train.json").read_text())["provenance"]
    assert provenance["aux-0"]["folds"] == [0] and provenance["aux-1"]["folds"] == [1] and provenance["main"]["folds"] == [0, 1]


def test_only_the_latest_checkpoint_keeps_a_resume_state_and_it_holds_no_second_copy_of_the_weights(crossfit_run):
    early, late = crossfit_run / "checkpoint-2", crossfit_run / "checkpoint-4"
    assert not (early / "state").exists() and all((early / d / "model.safetensors").is_file() for d in ("", "proposer", "aux-0", "aux-1"))
    saved = sorted(p.name for p in (late / "state").iterdir())
    assert [n for n in saved if n.startswith("optimizer")] == ["optimizer.bin", "optimizer_1.bin", "optimizer_2.bin", "optimizer_3.bin"]
    assert not [n for n in saved if n.endswith((".safetensors", ".bin")) and n.startswith("model")]


TIMING = ("rollout_s", "update_s", "cpu_s")  # wall and CPU seconds: the only fields of a metrics row a resumed run may change
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}  # the cpu scale's kind of role, a few kB here


@pytest.mark.slow
def test_a_crossfit_run_stopped_and_resumed_is_the_run_that_went_straight_through(tmp_path, tokens, tiny_llama):
    """What `cfbench train --steps 2` then `--resume` with the run's 4 steps does (the cpu runs span sittings that way),
    with LoRA roles and the proposer at its own temperature as at the cpu scale: steps P S | S P (one proposer and one
    solver step each side of the stop), then every audit row, every metrics row but its timings, the checkpoint's record
    and each role's adapter bit for bit are the uninterrupted run's, and the resumed call ran steps 3 and 4 only.

    The random model earns no reward, so every advantage is 0 and no adapter would move: a k1 KL term gives every update a
    gradient (minus the sampled tokens' log-probs), so each role's weights and AdamW moments change at each of its updates."""
    from safetensors.torch import load_file

    from cfbench.training.core.learner import role_dir

    objective = {"kl_coef": 0.1, "kl_type": "kl"}
    settings = {"model": str(tiny_llama), "lora": LORA, "proposer_temperature": 0.5, "objective": objective}
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train(config("crossfit", 4, 2) | settings, straight, proposer_engine=scripted(tokens))
    train(config("crossfit", 2, 2) | settings, stopped, proposer_engine=scripted(tokens))
    resumed: list[dict] = []
    train(config("crossfit", 4, 2) | settings, stopped, resume=True, on_step=resumed.append, proposer_engine=scripted(tokens))

    def untimed(run: Path) -> list[dict]:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]

    metrics = untimed(straight)
    assert [r["step"] for r in resumed] == [3, 4] and [r["phase"] for r in metrics] == ["proposer", "solver", "solver", "proposer"]
    assert untimed(stopped) == metrics and [{k: r[k] for k in r if k not in TIMING} for r in resumed] == metrics[2:]
    rows = audit(straight)
    assert rows == audit(stopped) and [r["step"] for r in rows] == [1, 1, 2, 2, 3, 3, 4, 4] and any(r["admitted"] for r in rows)
    assert (stopped / FOLDS_FILE).read_bytes() == (straight / FOLDS_FILE).read_bytes()
    record = "checkpoint-4/cfbench_train.json"
    assert (stopped / record).read_text() == (straight / record).read_text()  # config and every role's provenance
    moved = set()
    for role in ("main", "proposer", "aux-0", "aux-1"):
        ours, theirs, early = (
            load_file(role_dir(run / f"checkpoint-{step}", role) / "adapter_model.safetensors")
            for run, step in ((stopped, 4), (straight, 4), (straight, 2))
        )
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in theirs), role
        moved |= {role} if any(not torch.equal(early[k], theirs[k]) for k in theirs) else set()
    # the check bites: the roles trained after the stop (step 3 the main solver and its fold's, step 4 the proposer) moved
    assert moved == {"main", "proposer"} | {f"aux-{r['fold']}" for r in rows if r["step"] == 3 and r["admitted"]}


ROUND_ONE_SOURCES = [  # a small corpus of its own: 2 of these are the pool, 3 searchable titles for the 2-hop proposals
    ("volcano", "Mount Etna", "Mount Etna is an active stratovolcano on the east coast of Sicily in Italy, between Messina and Catania."),
    ("river", "Danube", "The Danube is the second longest river in Europe, flowing through ten countries before the Black Sea."),
    ("bridge", "Charles Bridge", "Charles Bridge is a medieval stone arch bridge that crosses the Vltava river in Prague, Czech Republic."),
    ("lake", "Lake Baikal", "Lake Baikal is a rift lake in Russia, the deepest and oldest freshwater lake on Earth by volume."),
]


@pytest.mark.slow
def test_same_source_feedback_happens_in_round_1_and_the_provenance_proves_it(tmp_path, tokens, tiny_llama):
    """With a pool of 2 sources and 2 tasks a step, every step proposes from both: the same-source control's scorer in step 3
    (round 1's last) has trained on that very source in step 2, and the record shows it."""
    corpus = tmp_path / "sources.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "contents": f'"{t}"\n{x}'}) + "\n" for i, t, x in ROUND_ONE_SOURCES))
    out = tmp_path / "same-source"
    train(
        config("crossfit", 3, 3, control="same-source", corpus=str(corpus)) | {"model": str(tiny_llama), "source_pool": 2},
        out,
        proposer_engine=scripted(tokens),
    )
    rows, stored = audit(out), json.loads((out / FOLDS_FILE).read_text())
    assert {r["round"] for r in rows} == {1} and stored["proposals_per_source"] == {"tasks_per_round": 6, "sources": 2, "min": 3, "max": 3}
    assert [r["source_id"] for r in rows if r["step"] == 2] == [r["source_id"] for r in rows if r["step"] == 3] == stored["pool"]
    trained_in_step_2 = {(r["source_id"], r["fold"]) for r in rows if r["step"] == 2 and r["admitted"]}
    same = [r for r in rows if r["step"] == 3 and r["admitted"] and r["scorer_provenance"]["trained_on_this_source"]]
    assert same, "no question of round 1 was scored by a solver that had trained on its source"
    for r in same:  # the scorer is its own fold's solver, and it trained on an admitted question of this source one step before
        assert r["scorer"] == f"aux-{r['fold']}" and (r["source_id"], r["fold"]) in trained_in_step_2
        assert r["fold"] in r["scorer_provenance"]["trained_on_folds"]
    assert not any(r["scorer_provenance"]["trained_on_this_source"] for r in rows if r["step"] < 3 and r["admitted"])
    # the labels are the proposer's drafts; it trained on both sources in step 1, and every label says so from then on
    assert [(r["step"], r["label_provenance"]) for r in rows if r["admitted"]] == [
        (r["step"], {"model": "proposer", "trained_on_this_source": r["step"] > 1}) for r in rows if r["admitted"]
    ]


def test_a_cli_run_writes_the_shared_checkpoint_layout_and_eval_scores_it(tmp_path):
    out = tmp_path / "dr-zero"
    run = subprocess.run(
        [sys.executable, "-m", "cfbench.cli", "train", "--treatment", "dr-zero", "--scale", "cpu-smoke", "--steps", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ckpt = out / "checkpoint-3"
    assert (ckpt / "model.safetensors").is_file() and (ckpt / "proposer" / "model.safetensors").is_file() and (ckpt / "state").is_dir()
    record = json.loads((ckpt / "cfbench_train.json").read_text())
    assert record["config"]["treatment"] == "dr-zero" and record["step"] == 3
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["round"], r["phase"]) for r in rows] == [(1, "proposer"), (1, "solver"), (1, "solver")]
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG" and len(audit(out)) == 12
    scored = subprocess.run(
        [
            sys.executable,
            "-m",
            "cfbench.cli",
            "eval",
            "--ckpt",
            str(ckpt),
            "--suite",
            "mini",
            "--out",
            str(tmp_path / "eval"),
            "--max-new-tokens",
            "4",
            "--max-searches",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert json.loads((tmp_path / "eval" / "results.json").read_text())["suite"]["n"] == 70


def test_msv_answers_every_candidate_6_times_and_admits_by_its_majorities(tmp_path, tokens):
    from cfbench.training.selfevolve import msv

    out = tmp_path / "msv"
    train(config("msv", 1, 1), out, proposer_engine=scripted(tokens))
    rows = audit(out)
    candidates = [r for r in rows if not r["parse_error"]]
    assert candidates
    for r in candidates:
        aware, blind = r["msv"]["aware"], r["msv"]["blind"]
        assert len(aware) == len(blind) == 3
        verdict = msv.admit(aware, blind)
        assert r["admitted"] == verdict.admitted and r["adopted_label"] == (verdict.label if verdict.admitted else None)
        assert r["draft_label"] and (r["scorer"] == "main") == r["admitted"]
    [metrics] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["msv_generations"] == 6 * len(candidates) and metrics["admitted"] + metrics["rejected"] == len(candidates)


def test_audit_and_cost_of_the_crossfit_run(crossfit_run, tmp_path):
    """The audit reads what a training run wrote. Gold per source: its title, which the scripted proposals ask for."""
    from cfbench.harness.corpus import load_corpus
    from cfbench.harness.paths import TRAIN_SOURCES
    from cfbench.training.audit.audit import audit_run
    from cfbench.training.audit.judge import GoldJudge
    from cfbench.training.audit.report import run_cost

    rows = audit(crossfit_run)
    corpus = load_corpus(TRAIN_SOURCES)
    titled = {r["source_id"]: r["source"].partition("\n")[0].strip('"') for r in rows}
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text(
        "".join(
            json.dumps({"id": i, "contents": c, "answers": [titled[i]]}) + "\n" for i, c in zip(corpus.ids, corpus.contents) if i in titled
        )
    )
    record = audit_run(crossfit_run, GoldJudge(labelled), tmp_path / "judged")
    metrics = [json.loads(line) for line in (crossfit_run / "metrics.jsonl").read_text().splitlines()]
    assert [s["pairs"] for s in record["steps"]] == [5 * m["admitted"] for m in metrics]
    judged = [json.loads(x) for p in sorted((tmp_path / "judged").glob("step-*.jsonl")) for x in p.read_text().splitlines()]
    resolved = [q for q in judged if q["reference"]["status"] == "resolved"]
    assert resolved and all(q["label"]["correct"] for q in resolved)  # the label is the title: right wherever it is in the text
    for s in record["steps"]:
        assert s["F"] in (0.0, None) and s["L"] in (0.0, None)  # a right label leaves no false agreement or lost credit
    cost = run_cost(crossfit_run, record)
    assert cost["generations"] == sum(m["generations"] for m in metrics) and cost["generated_tokens"] > 0 and cost["device"] == "cpu"
    assert all(m["cpu_s"] > 0 for m in metrics) and cost["cpu_hours"] == sum(m["cpu_s"] for m in metrics) / 3600
    # generations per step: the proposer's, then 5 scoring answers per admitted question, and training answers of solvers that did not score
    assert all(m["generations"] >= m["tasks"] + 5 * m["admitted"] for m in metrics)


def test_the_proposer_starts_from_proposer_model_and_resumes_from_it(tmp_path, tokens, tiny_llama):
    """knob proposer_model: the proposer's adapter is trained over (and records) its own start, every solver's over the
    run's model; a resumed run rebuilds each role over its own start, and the weights under the adapters are those starts."""
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    from cfbench.harness.checkpoints import resolve

    other = tmp_path / "other-start"
    with torch.random.fork_rng():
        torch.manual_seed(1)
        model = LlamaForCausalLM.from_pretrained(tiny_llama)
        for p in model.parameters():
            p.data.add_(torch.randn_like(p) * 0.02)
        model.save_pretrained(other)
    shutil.copy(tiny_llama / "tokenizer.json", other)
    for name in ("tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        if (tiny_llama / name).is_file():
            shutil.copy(tiny_llama / name, other)
    out = tmp_path / "dr-zero"
    settings = {"model": str(tiny_llama), "proposer_model": str(other), "lora": LORA}
    train(config("dr-zero", 1, 1) | settings, out, proposer_engine=scripted(tokens))
    train(config("dr-zero", 2, 1) | settings, out, resume=True, proposer_engine=scripted(tokens))
    last = out / "checkpoint-2"
    for role, start in (("proposer", other), ("", tiny_llama)):
        assert json.loads((last / role / "adapter_config.json").read_text())["base_model_name_or_path"] == str(start)
        merged = load_file(Path(resolve(str(last / role)).location) / "model.safetensors")
        embed = load_file(start / "model.safetensors")["model.embed_tokens.weight"]
        assert torch.equal(merged["model.embed_tokens.weight"], embed), role  # not an adapted module: the start's own weights
    assert not torch.equal(load_file(other / "model.safetensors")["model.embed_tokens.weight"], embed)  # the check tells them apart


def test_the_proposer_samples_and_updates_at_proposer_temperature_and_the_solvers_at_temperature(tmp_path, tiny_llama, monkeypatch):
    """knob proposer_temperature: the proposer's engine samples at it and its update's log-probs divide by it (the ratio
    compares like with like); every solver keeps the config's temperature. Absent, the proposer keeps it too."""
    from cfbench.training.selfevolve import run

    seen = []
    sampler, update = run.sampler, run.update

    def sampling(accelerator, role, tokens, ckpt, config, step, stream, *args):
        seen.append(("sample", stream, config.temperature))
        return sampler(accelerator, role, tokens, ckpt, config, step, stream, *args)

    def updating(role, accelerator, episodes, config, *args):
        seen.append(("update", None, config.temperature))
        return update(role, accelerator, episodes, config, *args)

    monkeypatch.setattr(run, "sampler", sampling)
    monkeypatch.setattr(run, "update", updating)
    train(config("dr-zero", 1, 1) | {"model": str(tiny_llama), "proposer_temperature": 0.5}, tmp_path / "cooler")
    assert ("sample", "proposer", 0.5) in seen and ("sample", "main", 1.0) in seen
    assert [t for kind, _, t in seen if kind == "update"] == [0.5]  # step 1 updates the proposer only
    seen.clear()
    train(config("dr-zero", 1, 1) | {"model": str(tiny_llama)}, tmp_path / "default")
    assert ("sample", "proposer", 1.0) in seen and [t for kind, _, t in seen if kind == "update"] == [1.0]
    assert "proposer_temperature" not in json.loads((tmp_path / "default" / "config.json").read_text())  # older runs resume
    assert json.loads((tmp_path / "cooler" / "config.json").read_text())["proposer_temperature"] == 0.5
