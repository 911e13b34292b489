"""`cfbench replay`: a fixed bank of saved questions and labels, scored by feedback solvers of other provenance.

The bank is N questions with their adopted labels, saved as bank.jsonl, drawn from the questions the
run admitted in its solver steps (the labels that entered training) round by round in turn, so every
round is in it (the first of each round, then the second, ...), kept in run order. Only the feedback
solver changes between variants: fresh copies of the run's starting model train on the bank (GRPO
against the adopted labels, the run's own knobs, `--epochs` passes in batches of `prompts_per_step`),
then each bank question is answered `samples_per_prompt` times by the solver its variant routes it to:
    coupled       the run's own main solver at its latest checkpoint, which trained on every admitted
                  question of the run's solver steps (Dr. Zero's loop); not trained again here
    same-source   folds by source id; a fold-h question is scored by the solver trained on fold h
    full-data     one solver trained on the whole bank scores every question
    random-split  folds by question id; scored by the solver trained on the other fold
    source-id     folds by source id; scored by the solver trained on the other fold (CrossFit)
    half-budget   source-id with every other update (alternate batches, shifted each epoch so every
                  batch is trained on over two epochs; one epoch of one batch equals source-id)
The audit judge then gives T_P, T_S, A, F (false agreement) and L per variant over the bank, with the
share of scored questions whose scorer had trained on that question's source: 1.0 for coupled (up to
bank questions after its latest checkpoint), same-source and full-data, 0.0 for source-id and
half-budget, about half for random-split (one source's questions land in both folds). Sampling is seeded by
(seed, update, solver), so a rerun gives the same numbers; a variant's trained answers are kept, not redone.

The judge reads what the audit's judge reads (the source and the proposer's retrieved passages), so a
`sheet:` judge's reference prompts are the audit's own (`--answers-from RUN` reuses them). A sheet judge
stops with the prompts of every variant written into its sheet; the trained solvers' answers are kept
(VARIANT.feedback.json), so the same command goes on without training them again.

Output in --out: bank.jsonl, VARIANT.feedback.json (the feedback solvers' answers and updates), VARIANT.json
(settings, rates, judged responses), replay.json and replay.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import torch

from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import dumps, jsonl_text, write_atomic
from cfbench.harness.paths import shown
from cfbench.training.audit.audit import RATES, judge_rows, out_dir, rates, run_config, saved_steps
from cfbench.training.config.choices import aux_updates_now
from cfbench.training.config.classes import SelfEvolutionConfig
from cfbench.training.selfevolve import crossfit
from cfbench.training.selfevolve.sources import FOLDS_FILE, Task, fold_of

VARIANTS = {  # variant -> (CrossFit control, auxiliary budget) that routes and trains its feedback solvers
    "coupled": ("none", "none"),  # no CrossFit: the run's main solver scores; budget "none": no training here
    "same-source": ("same-source", "full"),
    "full-data": ("full-data", "full"),
    "random-split": ("random-split", "full"),
    "source-id": ("none", "full"),
    "half-budget": ("none", "half"),
}
REPLAY_VERSION = 3  # 3: the bank carries the proposer's retrieved passages, which the judge reads


def load_bank(run: Path, n: int) -> list[dict]:
    trained = [
        {
            "task_id": r["task_id"],
            "step": step,
            "round": r["round"],
            "source_id": r["source_id"],
            "source": r["source"],
            "hops": r["hops"],
            "question": r["draft_question"],
            "label": r["adopted_label"],
            "evidence": r.get("evidence", []),
        }
        for step, rows in saved_steps(run)
        for r in rows
        if r["admitted"] and r["phase"] == "solver"
    ]
    if len(trained) < n:
        raise CfbenchError(
            f"{run}: --bank {n} asks for more questions than the run admitted in solver steps ({len(trained)}); "
            f"pass --bank {len(trained)} or less"
        )
    by_round = [[q for q in trained if q["round"] == r] for r in sorted({q["round"] for q in trained})]
    turns = sorted(((i, r, q["task_id"]) for r, mine in enumerate(by_round) for i, q in enumerate(mine)))
    chosen = {task_id for _, _, task_id in turns[:n]}
    return [q for q in trained if q["task_id"] in chosen]


def replay(
    run: Path, n: int, variants: list[str], judge, out: Path, epochs: int, on_variant: Callable[[str, dict], None] = lambda v, result: None
) -> dict:
    from cfbench.training.core.learner import checkpoints  # with torch and accelerate: not at CLI import

    config = run_config(run)
    bank = load_bank(run, n)
    text = jsonl_text(bank)
    saved = out_dir(out, "--out") / "bank.jsonl"
    if saved.is_file() and saved.read_text(encoding="utf-8") != text:
        raise CfbenchError(f"{saved} holds another bank (another run, --bank or replay version); choose a new --out")
    write_atomic(saved, text)
    folds = json.loads((run / FOLDS_FILE).read_text())["folds"] if (run / FOLDS_FILE).is_file() else {}
    results = {}

    def finish(variant: str, scored: dict, rows: list[dict]) -> None:
        trained = [r["scorer_provenance"]["trained_on_this_source"] for r in rows]
        results[variant] = {
            "settings": scored["settings"] | {"judge": judge.describe()["identity"]},
            **rates(rows),
            "updates": scored["updates"],
            "scorer_trained_on_source": sum(trained) / len(trained),
            "judged": rows,
        }
        write_atomic(out / f"{variant}.json", dumps(results[variant]) + "\n")
        on_variant(variant, results[variant])

    for variant in variants:
        settings = {
            "replay_version": REPLAY_VERSION,
            "variant": variant,
            "epochs": epochs,
            "run_config_sha256": hashlib.sha256((run / "config.json").read_bytes()).hexdigest(),  # not its path: a clone elsewhere resumes
            "bank_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "checkpoints": [p.name for _, p in checkpoints(run)] if variant == "coupled" else None,
        }  # a resumed run: coupled again
        # the trained solvers' answers are kept and judged again on every run (a corrected sheet answer counts;
        # cached and sheet judges ask nothing twice), so a judge that waits or fails never costs a retraining
        scored = _finished(out / f"{variant}.feedback.json", settings)
        if not scored:
            rows, updates = feedback(run, config, bank, folds, variant, epochs)
            scored = {"settings": settings, "updates": updates, "rows": rows}
            write_atomic(out / f"{variant}.feedback.json", dumps(scored) + "\n")
        judged = judge_rows(scored["rows"], judge)
        if not judge.waiting():  # a sheet judge with prompts open: every variant's prompts are asked, then it stops
            finish(variant, scored, judged)
    judge.require_answers()
    summary = {
        "run": shown(run),
        "bank": n,
        "epochs": epochs,
        "judge": judge.describe(),
        "variants": {
            v: {k: r[k] for k in (*RATES, "coverage", "pairs", "resolved_pairs", "updates", "scorer_trained_on_source")}
            for v, r in results.items()
        },
    }
    write_atomic(out / "replay.json", dumps(summary) + "\n")
    write_atomic(out / "replay.md", table(summary))
    return summary


def _finished(path: Path, settings: dict) -> dict | None:
    """A variant's saved result when it was made with these settings (anything else is redone)."""
    try:
        saved = json.loads(path.read_text())
        return saved if saved["settings"] == settings else None
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return None


def table(summary: dict) -> str:
    lines = [
        f"# Fixed-bank replay: {summary['bank']} questions of {summary['run']}",
        "",
        f"Judge {summary['judge']['identity']}; feedback solvers trained {summary['epochs']} epoch(s) on the bank. "
        "F = the feedback solver's answer matches the adopted label and both are wrong.",
        "",
        "| feedback | F | A | T_S | T_P | L | coverage | scorer trained on the source | updates |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for v, r in summary["variants"].items():
        cells = ["-" if r[k] is None else f"{r[k]:.3f}" for k in ("F", "A", "T_S", "T_P", "L", "coverage")]
        lines.append(
            f"| {v} | "
            + " | ".join(cells)
            + f" | {r['scorer_trained_on_source']:.2f} | "
            + ", ".join(f"{k} {u}" for k, u in r["updates"].items())
            + " |"
        )
    return "\n".join(lines) + "\n"


def feedback(
    run: Path, config: SelfEvolutionConfig, bank: list[dict], folds: dict[str, int], variant: str, epochs: int
) -> tuple[list[dict], dict[str, int]]:
    """Train the variant's feedback solvers on the bank, then score it: audit-style rows and updates per solver.

    `folds` are the run's source folds (folds.json); a source missing there gets the rule's fold.
    """
    from transformers import AutoTokenizer

    from cfbench.harness.backends.tokens import PromptTokens
    from cfbench.harness.checkpoints import TRAIN_RECORD, resolve
    from cfbench.harness.retrievers.choose import retriever_for
    from cfbench.training.core.learner import accelerator_for_training, checkpoints, learner, process_stream, sampler
    from cfbench.training.core.policy_update import reference_model, update
    from cfbench.training.selfevolve.loop import solver_answers, solver_episodes
    from cfbench.training.selfevolve.run import spread
    from cfbench.training.selfevolve.sources import corpus_path

    control, budget = VARIANTS[variant]
    tasks = [Task(b["task_id"], b["source_id"], b["source"], b["hops"]) for b in bank]
    labels = {b["task_id"]: b["label"] for b in bank}
    questions = {b["task_id"]: b["question"] for b in bank}
    evidence = {b["task_id"]: b["evidence"] for b in bank}
    fold = {t.id: crossfit.fold(t, {t.source_id: int(folds.get(t.source_id, fold_of(t.source_id)))}, control) for t in tasks}
    names = ["main"] if budget == "none" else crossfit.solvers(True, control)[1:]  # the feedback solvers
    accelerator = accelerator_for_training()
    torch.manual_seed(config.seed)
    ckpt = resolve(config.model)
    tokenizer = AutoTokenizer.from_pretrained(ckpt.location)
    tokens = PromptTokens(tokenizer)
    size = config.prompts_per_step
    batches = [tasks[i : i + size] for i in range(0, len(tasks), size)]
    if budget == "none":  # coupled: the run's main solver as it ended, with what it had trained on
        if not checkpoints(run):
            raise CfbenchError(f"{run}: --feedback coupled scores with the run's main solver, but the run has no checkpoint-N yet")
        latest = checkpoints(run)[-1][1]
        roles = {"main": learner(config, ckpt.location, accelerator, epochs * len(batches), latest)}
        provenance = crossfit.Provenance(names, json.loads((latest / TRAIN_RECORD).read_text())["provenance"])
    else:
        roles = {name: learner(config, ckpt.location, accelerator, epochs * len(batches)) for name in names}
        provenance = crossfit.Provenance(names)
    retriever = retriever_for(config.retriever, None if config.corpus == "bundled" else corpus_path(config))
    knobs, m = config.knobs, config.samples_per_prompt
    reference = reference_model(config, ckpt.location, accelerator)

    def answers(name: str, mine: list[Task], step: int, stream: str):
        # spread() shares `mine` out among the processes: each samples its share from its own stream
        engine = sampler(accelerator, roles[name], tokens, ckpt, config, step, process_stream(stream, accelerator))
        asked = [(t.id, questions[t.id], labels[t.id]) for t in mine]
        return solver_answers(asked, engine, retriever, knobs, m, name, spread(accelerator, config.rollout_rows))

    updates = dict.fromkeys(names, 0)
    for step, (epoch, index, batch) in enumerate(((e, i, b) for e in range(epochs) for i, b in enumerate(batches)), start=1):
        if budget == "none" or not aux_updates_now(budget, index + epoch):
            continue
        for name in names:
            mine = [t for t in batch if name in crossfit.trainers(fold[t.id], True, control)]
            if mine:
                samples = answers(name, mine, step, f"replay-{name}")
                episodes = solver_episodes(tokens, config, [(s, labels[t.id]) for t, s in zip(mine, samples)])
                update(roles[name], accelerator, episodes, config, tokenizer.pad_token_id or 0, reference)
                updates[name] += 1
                for t in mine:
                    provenance.add(name, fold[t.id], t.source_id)
    rows = {}
    for name in names:
        mine = [t for t in tasks if crossfit.scorer(fold[t.id], budget != "none", control) == name]
        for t, samples in zip(mine, answers(name, mine, 0, f"replay-score-{name}") if mine else []):
            rows[t.id] = {
                "step": 0,
                "round": 0,
                "phase": "replay",
                "task_id": t.id,
                "source_id": t.source_id,
                "source": t.contents,
                "hops": t.hops,
                "draft_question": questions[t.id],
                "evidence": evidence[t.id],
                "adopted_label": labels[t.id],
                "admitted": True,
                "fold": fold[t.id],
                "scorer": name,
                "scorer_provenance": provenance.of(name, t.source_id),
                "solver_responses": [{"prediction": s.prediction, "turns": s.turns} for s in samples],
            }
    return [rows[t.id] for t in tasks], updates
