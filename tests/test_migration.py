"""Records made before the cfbench.* namespace move (issue 17) still load, validate and resume.

The fixture is a real old-layout record: a leaderboard entry stored by commit c5c72b6, when evaluation
was the top-level `harness` package. Its paths use the portable `tasks/...` form, which the new layout
keeps; the record formats did not change.
"""

import json
from pathlib import Path

import pytest

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
