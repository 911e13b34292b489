"""Bad input ends with one line on stderr naming what and where, and exit status 2."""

import json
import re

import pytest
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness import suite as suite_mod
from cfbench.harness.paths import TASKS_DIR

# eval's status lines while it loads the index and the model come before an error found there; the error is one line
STATUS = re.compile(r"loading (index|model) \(.*\) \.\.\.$")


def run(*args):
    result = CliRunner().invoke(main, ["eval", *args])
    lines = [line for line in result.stderr.splitlines() if line.strip() and not STATUS.match(line)]
    return result.exit_code, lines


def test_unknown_suite(tmp_path):
    code, lines = run("--ckpt", "smollm2-135m", "--suite", "nq-dev", "--out", str(tmp_path / "r"))
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("error: unknown suite 'nq-dev'")


def test_malformed_suite_row(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": "a", "question": "q", "golden_answers": ["x"]}\n{"id": "b", "question": "q"}\n')
    code, lines = run("--ckpt", "smollm2-135m", "--suite", str(path), "--out", str(tmp_path / "r"))
    assert code == 2 and len(lines) == 1 and f"{path}:2: field 'golden_answers'" in lines[0]


def test_hash_mismatch(tmp_path, monkeypatch):
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "mini.jsonl").write_text((TASKS_DIR / "suites" / "mini.jsonl").read_text()[:-200] + "\n")
    monkeypatch.setattr(suite_mod, "TASKS_DIR", tmp_path)
    code, lines = run("--ckpt", "smollm2-135m", "--suite", "mini", "--out", str(tmp_path / "r"))
    assert code == 2 and len(lines) == 1 and "does not match the manifest" in lines[0]


@pytest.mark.parametrize(
    "ckpt,message",
    [
        ("./no/such/dir", "checkpoint './no/such/dir' not found"),
        ("not-a-model", "checkpoint 'not-a-model' not found"),
    ],
)
def test_missing_checkpoint(tmp_path, ckpt, message):
    code, lines = run("--ckpt", ckpt, "--suite", "mini", "--out", str(tmp_path / "r"))
    assert code == 2 and len(lines) == 1 and message in lines[0]


def test_checkpoint_dir_without_weights(tmp_path):
    (tmp_path / "ckpt").mkdir()
    code, lines = run("--ckpt", str(tmp_path / "ckpt"), "--suite", "mini", "--out", str(tmp_path / "r"))
    assert code == 2 and len(lines) == 1 and "has no config.json and weight files" in lines[0]


def test_corpus_row_missing_a_field(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": "1", "contents": '"A"\nb'}) + "\n" + json.dumps({"id": "2", "body": "x"}) + "\n")
    code, lines = run("--ckpt", "smollm2-135m", "--suite", "mini", "--corpus", str(path), "--out", str(tmp_path / "r"))
    assert code == 2 and len(lines) == 1 and f"{path}:2: missing field 'contents'" in lines[0]


def test_out_of_range_knob(tmp_path):
    code, lines = run("--ckpt", "smollm2-135m", "--suite", "mini", "--topk", "0", "--out", str(tmp_path / "r"))
    assert code == 2 and len(lines) == 1 and "knob topk must be an integer >= 1, got 0" in lines[0]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--backend", "vllm", "--ckpt", "smollm2-135m"], "--backend vllm needs vLLM (CUDA only)"),
        (["--backend", "openai", "--model", "m"], "--backend openai needs --base-url URL and --model NAME"),
        (["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--ckpt", "smollm2-135m"], "drop --ckpt"),
        (["--backend", "hf"], "--backend hf needs --ckpt"),
        (["--ckpt", "smollm2-135m", "--base-url", "http://127.0.0.1:9/v1"], "are for --backend openai"),
    ],
)
def test_engine_options_that_do_not_fit(tmp_path, args, message):
    code, lines = run(*args, "--suite", "mini", "--out", str(tmp_path / "r"))
    assert code == 2 and len(lines) == 1 and message in lines[0]
    assert not (tmp_path / "r").exists()  # nothing written before the engine exists


@pytest.mark.parametrize("ckpt", ["runs/missing", "./runs/missing", "checkpoints/step-40"])
def test_a_missing_local_path_is_not_taken_for_a_hub_id(tmp_path, monkeypatch, ckpt):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").mkdir()  # an existing first part makes "checkpoints/step-40" a path, not org/name
    code, lines = run("--ckpt", ckpt, "--suite", "mini", "--out", str(tmp_path / "r"))
    assert code == 2 and lines == [f"error: checkpoint {ckpt!r} not found: no such directory (a local path, so not looked up on the hub)"]


def test_out_naming_an_existing_file(tmp_path):
    (tmp_path / "r").write_text("not a run")
    code, lines = run("--ckpt", "smollm2-135m", "--suite", "mini", "--out", str(tmp_path / "r"))  # after the model loads
    assert code == 2 and lines[-1] == f"error: --out {tmp_path / 'r'} is a file, not a run directory; choose another --out"
    assert not any("Traceback" in line for line in lines)


def test_leaderboard_add_of_a_suite_named_like_a_file_in_the_root(tmp_path):
    from leaderboard_runs import SUITE, write_run

    root = tmp_path / "leaderboards"
    root.mkdir()
    (root / "README.md").write_text("# Leaderboards\n")
    run_dir = write_run(tmp_path / "run", 0.5, suite={**SUITE, "name": "README.md"})
    result = CliRunner().invoke(main, ["leaderboard", "add", str(run_dir), "--root", str(root)])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and lines == [
        f"error: {run_dir / 'results.json'}: suite 'README.md' names the file {root / 'README.md'}, "
        "not a leaderboard folder; rename the suite (suite.name) or choose another --root"
    ]
    assert (root / "README.md").read_text() == "# Leaderboards\n"
