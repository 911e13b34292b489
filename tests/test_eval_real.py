"""End to end with the real bundled model (SmolLM2-135M-Instruct) and the real BM25 retriever.

Budgets are cut (few tokens, one search) so the suite runs in CI time; the code path is the full one.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cfbench.harness.agent import run_batch
from cfbench.harness.checkpoints import resolve
from cfbench.harness.evaluate import evaluate
from cfbench.harness.paths import TASKS_DIR
from cfbench.harness.protocol import STOP, Knobs
from cfbench.harness.suite import load_suite

pytestmark = pytest.mark.slow  # Every test here runs the real SmolLM2-135M.

KNOBS = Knobs(max_new_tokens=12, max_searches=1)
CLI_KNOBS = [
    "--max-new-tokens",
    "6",
    "--max-searches",
    "1",
    "--batch-size",
    "1",
]  # 8 batches: a kill lands mid-run even on a loaded machine


@pytest.fixture(scope="module")
def small_suite(tmp_path_factory) -> Path:
    """Eight mini questions, two per benchmark from four benchmarks, as a user suite file."""
    rows = [json.loads(line) for line in (TASKS_DIR / "suites" / "mini.jsonl").read_text().splitlines()]
    picked = [r for b in ("nq", "triviaqa", "hotpotqa", "bamboogle") for r in [x for x in rows if x["benchmark"] == b][:2]]
    path = tmp_path_factory.mktemp("suite") / "small.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in picked))
    return path


def test_greedy_decoder_matches_transformers_generate(smollm2):
    prompts = [smollm2.chat_prompt("What is the capital of France?"), smollm2.chat_prompt("Name a prime number.")]
    ours = [c.text for c in smollm2.generate(prompts, 24, 4096, STOP)]
    for prompt, text in zip(prompts, ours):
        tokenizer = smollm2.tokens.tokenizer
        enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        out = smollm2.model.generate(**enc, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.eos_token_id)
        assert text == tokenizer.decode(out[0, enc.input_ids.shape[1] :], skip_special_tokens=True)


def test_stop_strings_end_generation_and_are_kept(smollm2):
    prompt = smollm2.chat_prompt("What is the capital of France?")
    [free] = [c.text for c in smollm2.generate([prompt], 40, 4096, ())]
    stop = free.split()[3]  # a word the model is known to reach
    [stopped] = [c.text for c in smollm2.generate([prompt], 40, 4096, (stop,))]
    assert stopped == free[: free.index(stop) + len(stop)]


def test_two_runs_are_byte_identical(tmp_path, smollm2, bm25, small_suite):
    suite = load_suite(str(small_suite))
    first = evaluate(suite, smollm2, bm25, KNOBS, tmp_path / "a", batch_size=4)
    second = evaluate(suite, smollm2, bm25, KNOBS, tmp_path / "b", batch_size=4)
    assert (tmp_path / "a" / "trajectories.jsonl").read_bytes() == (tmp_path / "b" / "trajectories.jsonl").read_bytes()
    assert first["scores"] == second["scores"]
    rows = [json.loads(line) for line in (tmp_path / "a" / "trajectories.jsonl").read_text().splitlines()]
    texts = [r["turns"][0]["generated"] for r in rows]
    assert all(t.strip() for t in texts) and len(set(texts)) > 1  # real, question-dependent model text
    assert first["model"]["weights_sha256"] == resolve("smollm2-135m").weights_sha256
    assert first["model"]["engine"] == "hf"


def test_the_batch_size_changes_no_trajectory(tmp_path, smollm2, bm25, small_suite):
    """--batch-size is an engine setting, not a protocol knob: a row's neighbours (their padding, when they
    finish) never change its greedy trajectory, so runs at different batch sizes compare."""
    suite = load_suite(str(small_suite))
    turns = {}
    for batch in (3, 8):
        evaluate(suite, smollm2, bm25, KNOBS, tmp_path / str(batch), batch_size=batch)
        rows = [json.loads(line) for line in (tmp_path / str(batch) / "trajectories.jsonl").read_text().splitlines()]
        turns[batch] = [(r["id"], r["turns"]) for r in rows]
    assert turns[3] == turns[8] and len(turns[3]) == 8


def _default_sigint() -> None:
    # A job started in the background by a non-interactive shell inherits SIGINT ignored, and Python keeps an
    # ignored SIGINT ignored: give the child Ctrl-C's default so the SIGINT case tests cfbench, not the launcher.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _lowest_priority() -> None:
    # The run to be killed yields the cores to this test's polling loop: on a machine busy with other work a starved
    # poller could otherwise see the second trajectory only after the run had written all eight (and exited).
    _default_sigint()
    os.nice(19)


def cli(*args, yielding: bool = False, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "cfbench.cli", "eval", "--ckpt", "smollm2-135m", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_lowest_priority if yielding else _default_sigint,
        **kw,
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_killed_cli_run_resumes_to_the_uninterrupted_result(tmp_path, small_suite, sig):
    reference = tmp_path / "reference"
    done = cli("--suite", str(small_suite), "--out", str(reference), *CLI_KNOBS)
    assert done.wait(timeout=600) == 0, done.stderr.read()
    table = done.stdout.read()
    assert "smollm2-135m on small" in table and "cover_em" in table and "bamboogle" in table
    out = tmp_path / "killed"
    proc = cli("--suite", str(small_suite), "--out", str(out), *CLI_KNOBS, yielding=True)
    record = out / "trajectories.jsonl"
    deadline = time.time() + 600
    while not (record.exists() and record.read_text().count("\n") >= 2) and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, sig)
    code = proc.wait(timeout=120)
    segments = out / "segments.jsonl"
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL and not segments.exists()
    else:  # the interrupted session is recorded: its time counts in the run's wall time
        assert code == 130 and "rerun with --resume" in proc.stderr.read()
        assert json.loads(segments.read_text())["questions"] >= 2
    assert record.read_text().count("\n") < 8
    resumed = cli("--suite", str(small_suite), "--out", str(out), "--resume", *CLI_KNOBS)
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read()
    assert record.read_bytes() == (reference / "trajectories.jsonl").read_bytes()
    ref_scores = json.loads((reference / "results.json").read_text())["scores"]
    assert json.loads((out / "results.json").read_text())["scores"] == ref_scores
    assert json.loads((out / "results.json").read_text())["segments"] == (1 if sig == signal.SIGKILL else 2)


def test_kv_reuse_across_turns_changes_nothing(smollm2, bm25, small_suite, monkeypatch):
    questions = list(load_suite(str(small_suite)).questions)[:3]
    knobs = Knobs(max_new_tokens=16, max_searches=2)
    prefilled = []  # tokens of every multi-token (prefill) forward pass
    forward = smollm2.model.forward

    def counting(*args, **kwargs):
        if kwargs["input_ids"].shape[1] > 1:
            prefilled.append(kwargs["input_ids"].shape[1])
        return forward(*args, **kwargs)

    monkeypatch.setattr(smollm2.model, "forward", counting)
    with_reuse = run_batch(questions, smollm2, bm25, knobs)
    reuse_tokens, prefilled[:] = sum(prefilled), []

    class Fresh:  # the same backend, forgetting every previous context before each call
        def __getattr__(self, name):
            return getattr(smollm2, name)

        def generate(self, *args):
            smollm2._reusable = []
            return smollm2.generate(*args)

    without = run_batch(questions, Fresh(), bm25, knobs)
    assert [t.turns for t in with_reuse] == [t.turns for t in without]
    assert reuse_tokens < 0.7 * sum(prefilled)  # later turns prefilled only what was new
