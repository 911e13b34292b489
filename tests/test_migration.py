"""Records made before the cfbench.* namespace move (issue 17) still load, validate and resume.

The fixtures are real old-layout records: a leaderboard entry stored by commit c5c72b6, when evaluation
was the top-level `harness` package (its paths use the portable `tasks/...` form, which the new layout
keeps; the record formats did not change), and a training checkpoint written by that commit's own
trainer, taken from git history.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.evaluate import evaluate
from cfbench.harness.paths import from_portable
from cfbench.harness.protocol import Knobs
from cfbench.harness.runrecord import CONFIG, RECORD_VERSION, RESULTS, TRAJECTORIES
from cfbench.harness.suite import load_suite
from cfbench.leaderboard.store import add, load_run
from cfbench.training.treatments import SELF_EVOLUTION, TREATMENTS, load_config, scales
from scripted import ScriptedBackend

REPO = Path(__file__).resolve().parent.parent
OLD_ENTRY = REPO / "leaderboards" / "mini" / "runs" / "9481e12bc0a54d6a"
OLD_COMMIT = "c5c72b6"  # the last commit of the old layout (harness/, training/, tasks/ as top-level packages)
RUN_KEYS = ("suite", "protocol", "metric_version", "model", "retriever", "batch_size", "seed")


class OldModel(ScriptedBackend):
    """Stands in for the recorded model by its recorded identity: this test is about the record, not the model."""

    def __init__(self, described: dict) -> None:
        super().__init__(lambda context: "<answer> unknown </answer>")
        self.described = described

    def describe(self) -> dict:
        return self.described


def test_an_old_entry_loads_and_its_recorded_inputs_resolve_to_the_same_bytes(tmp_path):
    old = load_run(OLD_ENTRY)
    suite, retriever = old.results["suite"], old.results["retriever"]
    assert suite["path"] == "tasks/suites/mini.jsonl" and retriever["corpus"] == "tasks/corpus/bundled.jsonl.gz"
    assert jsonl.sha256(jsonl.read_bytes(from_portable(suite["path"]))) == suite["sha256"]
    assert jsonl.sha256(jsonl.read_bytes(from_portable(retriever["corpus"]))) == retriever["corpus_sha256"]
    stored, new = add(old, tmp_path, {})
    assert new and stored.name == OLD_ENTRY.name  # content-addressed: re-storing gives the id the old layout gave


def test_an_old_layout_run_directory_resumes(tmp_path, bm25):
    """run.json as the old harness wrote it (rebuilt from the entry's results.json, which carries the same fields)."""
    results = json.loads((OLD_ENTRY / RESULTS).read_text())
    out = tmp_path / "run"
    out.mkdir()
    (out / CONFIG).write_text(jsonl.dumps({"record_version": RECORD_VERSION, **{k: results[k] for k in RUN_KEYS}}) + "\n")
    knobs = Knobs(**results["protocol"]["knobs"])
    with pytest.raises(CfbenchError, match="already holds a run; pass --resume"):
        evaluate(load_suite("mini"), OldModel(results["model"]), bm25, knobs, out, batch_size=results["batch_size"])
    done = evaluate(load_suite("mini"), OldModel(results["model"]), bm25, knobs, out, batch_size=results["batch_size"], resume=True)
    assert {k: done[k] for k in RUN_KEYS} == {k: results[k] for k in RUN_KEYS}
    assert len((out / TRAJECTORIES).read_text().splitlines()) == 70
    assert json.loads((out / CONFIG).read_text())["suite"]["path"] == "tasks/suites/mini.jsonl"  # the record is kept as it was


@pytest.mark.parametrize("treatment", sorted(TREATMENTS))
def test_every_shipped_training_config_still_loads(treatment):
    assert scales(treatment), treatment
    for scale in scales(treatment):
        config = load_config(treatment, scale)
        assert isinstance(config.model, str) and config.model, (treatment, scale)
        if treatment in SELF_EVOLUTION:
            assert (config.msv, config.crossfit) == SELF_EVOLUTION[treatment]


@pytest.mark.slow
def test_a_training_checkpoint_written_before_the_move_resumes(tmp_path, tiny_llama):
    """The old layout's own trainer (commit c5c72b6, top-level `training`, run from `git archive` of it) writes
    step 1; today's cfbench.training resumes it: its config, weights and AdamW state carry on to step 2."""
    old = tmp_path / "old-layout"
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", OLD_COMMIT], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    out = tmp_path / "run"
    step_1 = (
        "from training.trainer import train; from training.treatments import load_config; "
        f"train(load_config('search-r1', 'cpu-smoke', 1) | {{'model': {str(tiny_llama)!r}}}, __import__('pathlib').Path({str(out)!r}))"
    )
    subprocess.run([sys.executable, "-c", step_1], cwd=old, env=os.environ | {"PYTHONPATH": str(old)}, check=True, capture_output=True)
    assert (out / "checkpoint-1" / "state").is_dir() and not (out / "checkpoint-2").exists()

    from cfbench.training.config.classes import SearchR1Config
    from cfbench.training.config.schema import parse
    from cfbench.training.trainer import train

    saved = out / "config.json"  # the run's own settings (the shipped cpu-smoke config has changed since)
    train(parse(SearchR1Config, json.loads(saved.read_text()), str(saved)) | {"steps": 2}, out, resume=True)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "sampler_gap" not in rows[0] and "sampler_gap" in rows[1]  # step 1 is the old trainer's
    optimizer = torch.load(out / "checkpoint-2" / "state" / "optimizer.bin", weights_only=False)
    assert {int(s["step"]) for s in optimizer["state"].values()} == {2}  # AdamW's moments went on from the old checkpoint
