"""Resume and run-record rules, exercised with a scripted policy (the loop's control flow only)."""

import json
from importlib import metadata

import pytest

from cfbench.harness import evaluate as evaluate_module
from cfbench.harness.errors import CfbenchError
from cfbench.harness.evaluate import evaluate, host
from cfbench.harness.protocol import Knobs
from cfbench.harness.runrecord import RunDir
from cfbench.harness.suite import load_suite
from scripted import ScriptedBackend, question_of


def policy(context: str) -> str:
    if "<information>Doc" not in context:
        return f"<search> {question_of(context)} </search>"
    return "<answer> " + context.rsplit('Doc 1(Title: "', 1)[1].split('"', 1)[0] + " </answer>"


class Interrupting(ScriptedBackend):
    """Raises KeyboardInterrupt on the n-th generate call, as Ctrl-C would."""

    def __init__(self, n: int) -> None:
        super().__init__(policy)
        self.n = n

    def generate(self, *args):
        if len(self.calls) + 1 == self.n:
            raise KeyboardInterrupt
        return super().generate(*args)


@pytest.fixture
def suite():
    return load_suite("mini")


def run(out, suite, bm25, backend=None, **kw):
    return evaluate(suite, backend or ScriptedBackend(policy), bm25, Knobs(), out, batch_size=16, **kw)


def test_record_layout_and_provenance(tmp_path, suite, bm25):
    results = run(tmp_path / "r", suite, bm25)
    rows = [json.loads(line) for line in (tmp_path / "r" / "trajectories.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [q.id for q in suite.questions]
    assert set(rows[0]) == {"id", "benchmark", "question", "golden_answers", "turns", "prediction", "scores"}
    assert set(rows[0]["turns"][0]) >= {"generated", "action", "query", "doc_ids"}
    on_disk = json.loads((tmp_path / "r" / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results))
    for key in ("suite", "protocol", "metric_version", "model", "retriever", "packages", "git_commit", "seed", "wall_time_s"):
        assert key in on_disk, key
    assert on_disk["suite"]["sha256"] == suite.sha256
    assert on_disk["packages"]["openai"] == metadata.version("openai")  # the openai engine's SDK is part of the record
    assert on_disk["protocol"] == {"version": "v1", "knobs": Knobs().as_dict()}
    assert on_disk["retriever"]["index_sha256"] == bm25.describe()["index_sha256"]
    assert set(on_disk["scores"]) >= {"nq", "bamboogle", "avg7", "multi_hop", "single_hop"}
    assert on_disk["stats"]["searches_per_question"] == 1.0


def test_interrupted_run_resumes_to_the_same_record(tmp_path, suite, bm25):
    reference = run(tmp_path / "full", suite, bm25)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut", suite, bm25, backend=Interrupting(n=5))  # in the 3rd of 5 batches
    assert len((tmp_path / "cut" / "trajectories.jsonl").read_text().splitlines()) == 32
    resumed = run(tmp_path / "cut", suite, bm25, resume=True)
    assert resumed["scores"] == reference["scores"]
    assert (tmp_path / "cut" / "trajectories.jsonl").read_bytes() == (tmp_path / "full" / "trajectories.jsonl").read_bytes()
    assert resumed["segments"] == 2


def test_an_interrupt_just_after_a_write_counts_that_batch_in_the_segment(tmp_path, suite, bm25, monkeypatch):
    """Ctrl-C can land between a batch's write and anything after it; the segment says what the record holds."""
    append, writes = RunDir.append, []

    def append_then_interrupt(self, rows):
        append(self, rows)
        writes.append(len(rows))
        if len(writes) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunDir, "append", append_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "r", suite, bm25)
    monkeypatch.undo()
    (segment,) = [json.loads(line) for line in (tmp_path / "r" / "segments.jsonl").read_text().splitlines()]
    assert segment["questions"] == 32 == len((tmp_path / "r" / "trajectories.jsonl").read_text().splitlines())
    resumed = run(tmp_path / "r", suite, bm25, resume=True)
    assert [json.loads(line)["questions"] for line in (tmp_path / "r" / "segments.jsonl").read_text().splitlines()] == [32, 38]
    assert resumed["segments"] == 2


def test_each_segment_says_which_machine_ran_it(tmp_path, suite, bm25, monkeypatch):
    here = host()
    assert here["torch_cpu_capability"] and here["machine"]
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "r", suite, bm25, backend=Interrupting(n=5))
    elsewhere = {**here, "cpu": "another CPU", "torch_cpu_capability": "AVX2"}
    monkeypatch.setattr(evaluate_module, "host", lambda: elsewhere)
    resumed = run(tmp_path / "r", suite, bm25, resume=True)
    segments = [json.loads(line) for line in (tmp_path / "r" / "segments.jsonl").read_text().splitlines()]
    assert [s["host"] for s in segments] == [here, elsewhere]
    assert resumed["hosts"] == [here, elsewhere]
    assert json.loads((tmp_path / "r" / "results.json").read_text())["hosts"] == [here, elsewhere]


def test_torn_lines_and_partial_batches_are_redone(tmp_path, suite, bm25):
    reference = run(tmp_path / "full", suite, bm25)
    lines = (tmp_path / "full" / "trajectories.jsonl").read_text().splitlines(keepends=True)
    out = tmp_path / "cut"
    out.mkdir()
    (out / "run.json").write_bytes((tmp_path / "full" / "run.json").read_bytes())
    # one whole batch, three rows of the next, and half a line, as a SIGKILL mid-write leaves it
    (out / "trajectories.jsonl").write_text("".join(lines[:19]) + lines[19][:40])
    backend = ScriptedBackend(policy)
    resumed = run(out, suite, bm25, backend=backend, resume=True)
    assert resumed["scores"] == reference["scores"]
    assert (out / "trajectories.jsonl").read_bytes() == (tmp_path / "full" / "trajectories.jsonl").read_bytes()
    assert backend.calls[0] == 16  # the partial batch was redone whole


def test_an_existing_run_is_never_overwritten(tmp_path, suite, bm25):
    run(tmp_path / "r", suite, bm25)
    before = (tmp_path / "r" / "trajectories.jsonl").read_bytes()
    with pytest.raises(CfbenchError, match="already holds a run; pass --resume"):
        run(tmp_path / "r", suite, bm25)
    assert (tmp_path / "r" / "trajectories.jsonl").read_bytes() == before


def test_resume_with_other_settings_is_refused(tmp_path, suite, bm25):
    run(tmp_path / "r", suite, bm25)
    with pytest.raises(CfbenchError, match=r"settings differ \(protocol.knobs.topk: run has 3, now 5\)"):
        evaluate(suite, ScriptedBackend(policy), bm25, Knobs(topk=5), tmp_path / "r", batch_size=16, resume=True)


def test_resume_finds_hashed_inputs_in_a_new_place_but_not_changed_ones(tmp_path, suite, bm25):
    run(tmp_path / "r", suite, bm25)
    config = tmp_path / "r" / "run.json"
    recorded = json.loads(config.read_text())
    moved = {
        **recorded,
        "suite": {**recorded["suite"], "path": "/elsewhere/fixed.jsonl"},
        "retriever": {**recorded["retriever"], "corpus": "/elsewhere/corpus.jsonl.gz"},
    }
    config.write_text(json.dumps(moved))
    assert run(tmp_path / "r", suite, bm25, resume=True)["suite"]["path"] == recorded["suite"]["path"]
    config.write_text(json.dumps({**moved, "suite": {**moved["suite"], "sha256": "0" * 64}}))
    with pytest.raises(CfbenchError, match=r"settings differ \(suite.sha256: run has '0000"):
        run(tmp_path / "r", suite, bm25, resume=True)


def test_a_model_is_known_by_its_weights_hash_and_by_its_location_only_without_one(tmp_path, suite, bm25):
    class Located(ScriptedBackend):
        def __init__(self, location, sha):
            super().__init__(policy)
            self.location, self.sha = location, sha

        def describe(self):
            return {**super().describe(), "model_location": self.location, "weights_sha256": self.sha}

    evaluate(suite, Located("/cache-a/m", "ab" * 32), bm25, Knobs(), tmp_path / "r", batch_size=16)
    evaluate(suite, Located("/cache-b/m", "ab" * 32), bm25, Knobs(), tmp_path / "r", batch_size=16, resume=True)
    with pytest.raises(CfbenchError, match=r"model.weights_sha256: run has 'abab"):
        evaluate(suite, Located("/cache-a/m", "cd" * 32), bm25, Knobs(), tmp_path / "r", batch_size=16, resume=True)
    evaluate(suite, Located("org/hub-model", None), bm25, Knobs(), tmp_path / "h", batch_size=16)
    with pytest.raises(CfbenchError, match=r"model.model_location: run has 'org/hub-model', now 'org/other'"):
        evaluate(suite, Located("org/other", None), bm25, Knobs(), tmp_path / "h", batch_size=16, resume=True)


def test_a_corrupt_line_inside_the_record_stops_resume(tmp_path, suite, bm25):
    run(tmp_path / "r", suite, bm25)
    path = tmp_path / "r" / "trajectories.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + "{oops\n" + "".join(lines[4:]))
    with pytest.raises(CfbenchError, match=r"trajectories.jsonl:4: corrupt line"):
        run(tmp_path / "r", suite, bm25, resume=True)


def test_a_record_cut_anywhere_resumes_to_a_valid_identical_file(tmp_path, suite, bm25):
    """Fuzz: the reference record cut at seeded random points, and at each batch's end minus its newline (a
    last line that lost only its newline); every resume must leave the reference bytes, every line one row."""
    import random
    import shutil

    reference = tmp_path / "full"
    run(reference, suite, bm25)
    data = (reference / "trajectories.jsonl").read_bytes()
    ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    cuts = [end - 1 for end in ends[15::16] + ends[-1:]] + random.Random(0).sample(range(len(data)), 12)
    for cut in cuts:
        out = tmp_path / f"cut-{cut}"
        shutil.copytree(reference, out)
        (out / "trajectories.jsonl").write_bytes(data[:cut])
        (out / "segments.jsonl").write_bytes((out / "segments.jsonl").read_bytes()[:-5])  # the segment write was torn too
        run(out, suite, bm25, resume=True)
        assert (out / "trajectories.jsonl").read_bytes() == data, cut
        assert all(json.loads(line) for line in (out / "segments.jsonl").read_text().splitlines())


def test_an_append_repairs_the_tail_first(tmp_path):
    from cfbench.harness.runrecord import RunDir

    record = RunDir(tmp_path)
    path = tmp_path / "trajectories.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b"}')  # the last line lost only its newline
    record.append([{"id": "c"}])
    assert path.read_text() == '{"id": "a"}\n{"id": "b"}\n{"id": "c"}\n'
    path.write_text('{"id": "a"}\n{"id": "b", "tu')  # a torn write
    record.append([{"id": "c"}])
    assert path.read_text() == '{"id": "a"}\n{"id": "c"}\n'


def test_a_record_torn_inside_a_utf8_character_resumes(tmp_path, suite, bm25):
    """A write killed after the first byte of a two-byte character (0xC3 of "é"): the torn line is redone, not a decode error."""
    import shutil

    reference = tmp_path / "full"
    run(reference, suite, bm25)
    data = (reference / "trajectories.jsonl").read_bytes()
    first_batch = [i for i, byte in enumerate(data) if byte == ord("\n")][15] + 1
    lead = next(i for i in range(first_batch, len(data)) if data[i] >= 0xC2)  # the first multi-byte character after it
    out = tmp_path / "cut"
    shutil.copytree(reference, out)
    (out / "trajectories.jsonl").write_bytes(data[: lead + 1])
    run(out, suite, bm25, resume=True)
    assert (out / "trajectories.jsonl").read_bytes() == data


def test_a_second_writer_of_a_run_is_refused_naming_the_first(tmp_path, suite, bm25):
    """Two evaluations of one --out, the second with --resume while the first writes: the second is refused, the record
    untouched; once the first has ended, the lock is gone and the run resumes."""
    import subprocess
    import sys

    run(tmp_path / "r", suite, bm25)
    before = {p.name: p.read_bytes() for p in (tmp_path / "r").iterdir()}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from cfbench.harness.runrecord import RunDir; "
            "r = RunDir(Path(sys.argv[1])); r._take_lock(); print('locked', flush=True); sys.stdin.read()",
            str(tmp_path / "r"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(CfbenchError, match=rf"r is being written by process {holder.pid}; wait for it to end") as refused:
            run(tmp_path / "r", suite, bm25, resume=True)
        assert "\n" not in str(refused.value)
        assert {p.name: p.read_bytes() for p in (tmp_path / "r").iterdir() if p.name != ".lock"} == before
    finally:
        holder.communicate("")
    run(tmp_path / "r", suite, bm25, resume=True)  # the holder's end released it
    assert not (tmp_path / "r" / ".lock").exists()
