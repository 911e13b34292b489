"""Scores the leaderboard can vouch for: every per-question score is recomputed from the stored
prediction and gold answers, gold answers are the suite's own, builds write every suite or none, and
entries stored before predictions were kept are marked "scores only" until re-added."""

from __future__ import annotations

import gzip
import json
import shutil

from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness.evaluate import evaluate
from cfbench.harness.jsonl import jsonl_text
from cfbench.harness.metrics import aggregate, score
from cfbench.harness.paths import TASKS_DIR
from cfbench.harness.protocol import Knobs
from cfbench.harness.suite import load_suite
from cfbench.leaderboard.store import content_id, load_run
from leaderboard_runs import write_run
from scripted import ScriptedBackend, question_of

ACCURACY = {"nq": 0.45, "triviaqa": 0.6, "popqa": 0.35, "hotpotqa": 0.3, "2wikimultihopqa": 0.3, "musique": 0.1, "bamboogle": 0.2}
OUTPUTS = ("README.md", "results.csv", "results.json", "results.tex", "index.html")


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def forge(entry, rows):
    """Rewrite an entry around edited trajectory rows as a forger would: scores, results and the folder's content hash
    recomputed to match. Returns the renamed entry."""
    scores = [{"benchmark": r["benchmark"], "id": r["id"], "scores": r["scores"]} for r in rows]
    (entry / "trajectories.jsonl.gz").write_bytes(gzip.compress(jsonl_text(rows).encode()))
    (entry / "scores.jsonl").write_text(jsonl_text(scores))
    results = json.loads((entry / "results.json").read_text()) | {"scores": aggregate(scores)}
    (entry / "results.json").write_text(json.dumps(results))
    forged = entry.with_name(content_id(results, scores, rows))
    entry.rename(forged)
    return forged


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def rewrite(run, rows):
    """Edit a run's trajectories and make results.json agree with them, as a careful forger would."""
    (run / "trajectories.jsonl").write_text(jsonl_text(rows))
    results = json.loads((run / "results.json").read_text())
    results["scores"] = aggregate(rows)
    (run / "results.json").write_text(json.dumps(results))


def test_a_forged_score_is_refused_even_when_results_agree(tmp_path):
    """The hardening probe's forgery: a prediction of "" scored 1.0, with results.json edited to match."""
    run = write_run(tmp_path / "run", ACCURACY, seed=1)
    rows = rows_of(run / "trajectories.jsonl")
    wrong = next(i for i, r in enumerate(rows) if r["scores"]["cover_em"] == 0.0)
    rows[wrong] |= {"prediction": "", "scores": {"cover_em": 1.0, "em": 1.0, "sub_em": 1.0, "f1": 1.0}}
    rewrite(run, rows)
    code, lines = cli("leaderboard", "add", run, "--root", tmp_path / "lb")
    assert code == 2 and len(lines) == 1
    assert f"question {rows[wrong]['id']}: stored cover_em 1.0 but prediction '' scores 0.0" in lines[0]
    assert not (tmp_path / "lb").exists()


def test_a_stored_entry_edited_and_renamed_to_its_new_hash_is_refused(tmp_path):
    root = tmp_path / "lb"
    run = write_run(tmp_path / "run", ACCURACY, seed=1)
    assert cli("leaderboard", "add", run, "--root", root)[0] == 0
    entry = root / "fixed1325" / "runs" / load_run(run).id
    rows = [json.loads(line) for line in gzip.decompress((entry / "trajectories.jsonl.gz").read_bytes()).decode().splitlines()]
    wrong = next(i for i, r in enumerate(rows) if r["scores"]["cover_em"] == 0.0)
    rows[wrong]["scores"] = {"cover_em": 1.0, "em": 1.0, "sub_em": 1.0, "f1": 1.0}
    forged = forge(entry, rows)
    code, lines = cli("leaderboard", "build", "--root", root)
    assert code == 2 and len(lines) == 1 and str(forged) in lines[0] and "stored cover_em 1.0 but prediction" in lines[0]


def test_an_entry_whose_predictions_were_set_to_gold_is_refused_by_build_and_rescore(tmp_path):
    """The hardening probe's forgery: every prediction set to its gold answer, scores, results and the folder's hash all
    recomputed. Only the model's generated text (its last turn still answers otherwise) gives it away."""
    root = tmp_path / "lb"
    run = write_run(tmp_path / "run", ACCURACY, seed=1)
    assert cli("leaderboard", "add", run, "--root", root)[0] == 0
    assert cli("leaderboard", "build", "--root", root)[0] == 0
    entry = root / "fixed1325" / "runs" / load_run(run).id
    rows = [json.loads(line) for line in gzip.decompress((entry / "trajectories.jsonl.gz").read_bytes()).decode().splitlines()]
    for row in rows:
        row |= {"prediction": row["golden_answers"][0], "scores": score(row["golden_answers"][0], row["golden_answers"])}
    forged = forge(entry, rows)
    first = next(r for r in rows if r["turns"][-1]["generated"] != "<answer> x </answer>")
    for command in ("build", "rescore"):
        code, lines = cli("leaderboard", command, "--root", root)
        assert code == 2 and len(lines) == 1, (command, lines)
        assert f"question {first['id']}: stored prediction 'x' but the model's generated text answers" in lines[0]
        assert str(forged) in lines[0] and "the record was edited" in lines[0]


def test_gold_answers_are_checked_against_the_bundled_suite(tmp_path, bm25):
    """Editing gold and score together passes the rescoring, so the gold itself must be the suite's."""
    policy = ScriptedBackend(lambda context: f"<answer> {question_of(context).split()[0]} </answer>")
    evaluate(load_suite("mini"), policy, bm25, Knobs(), tmp_path / "run", batch_size=16)
    rows = rows_of(tmp_path / "run" / "trajectories.jsonl")
    rows[0] |= {"golden_answers": [rows[0]["prediction"]], "scores": {"cover_em": 1.0, "em": 1.0, "sub_em": 1.0, "f1": 1.0}}
    rewrite(tmp_path / "run", rows)
    code, lines = cli("leaderboard", "add", tmp_path / "run", "--root", tmp_path / "lb")
    assert code == 2 and len(lines) == 1
    assert f"question {rows[0]['id']}: gold answers [{rows[0]['prediction']!r}] are not suite 'mini''s" in lines[0]


def test_build_writes_every_suite_or_none(tmp_path):
    root = tmp_path / "lb"
    assert cli("leaderboard", "add", write_run(tmp_path / "a", ACCURACY, seed=1), "--root", root)[0] == 0
    mini = {"name": "mini", "path": "tasks/suites/mini.jsonl", "sha256": "d" * 64}
    other = write_run(tmp_path / "b", ACCURACY, seed=2, suite=mini, per_benchmark=10)
    assert cli("leaderboard", "add", other, "--root", root)[0] == 0
    assert cli("leaderboard", "build", "--root", root)[0] == 0
    before = {(s, n): (root / s / n).read_bytes() for s in ("fixed1325", "mini") for n in OUTPUTS}
    # fixed1325 (built first) gets a new run, mini a damaged one: nothing may be rewritten.
    assert cli("leaderboard", "add", write_run(tmp_path / "c", ACCURACY, seed=3, model="c"), "--root", root)[0] == 0
    (entry,) = (root / "mini" / "runs").iterdir()
    (entry / "scores.jsonl").write_text((entry / "scores.jsonl").read_text().replace('"cover_em": 1.0', '"cover_em": 0.0', 1))
    code, lines = cli("leaderboard", "build", "--root", root)
    assert code == 2 and len(lines) == 1 and str(entry) in lines[0]
    assert {(s, n): (root / s / n).read_bytes() for s in ("fixed1325", "mini") for n in OUTPUTS} == before


def test_scores_only_entries_are_marked_and_replaced_when_re_added(tmp_path):
    root = tmp_path / "lb"
    run = write_run(tmp_path / "run", ACCURACY, seed=1)
    assert cli("leaderboard", "add", run, "--root", root, "--name", "old", "--treatment", "Base")[0] == 0
    # Make it an entry as stored before trajectories were kept: no trajectories, the old content id.
    full = root / "fixed1325" / "runs" / load_run(run).id
    (full / "trajectories.jsonl.gz").unlink()
    legacy = full.with_name(content_id(load_run(run).results, load_run(run).rows, None))
    full.rename(legacy)
    code, lines = cli("leaderboard", "build", "--root", root)
    assert code == 0
    board = json.loads((root / "fixed1325" / "results.json").read_text())
    assert board["tables"] == [] and [r["id"] for r in board["scores_only"]] == [legacy.name]  # apart: not ranked, not tested
    assert "## Scores only: not ranked, not tested" in (root / "fixed1325" / "README.md").read_text()
    code, lines = cli("leaderboard", "rescore", "--root", root)
    assert code == 0 and lines == [f"{root / 'fixed1325'}: 0 runs rescored from their predictions, 1 scores only; tables identical"]

    # Re-adding the run directory replaces the scores-only entry and keeps its labels.
    assert cli("leaderboard", "add", run, "--root", root)[0] == 0
    assert [p.name for p in (root / "fixed1325" / "runs").iterdir()] == [full.name]
    assert load_run(full).labels == {"name": "old", "treatment": "Base", "scale": ""}
    code, lines = cli("leaderboard", "rescore", "--root", root)
    assert code == 2 and "results.json" in lines[0] and "run cfbench leaderboard build" in lines[0]
    assert cli("leaderboard", "build", "--root", root)[0] == 0
    code, lines = cli("leaderboard", "rescore", "--root", root)
    assert code == 0 and lines == [f"{root / 'fixed1325'}: 1 runs rescored from their predictions, 0 scores only; tables identical"]


def test_an_entry_keeps_the_runs_trajectories_byte_for_byte(tmp_path):
    run = write_run(tmp_path / "run", ACCURACY, seed=1)
    assert cli("leaderboard", "add", run, "--root", tmp_path / "lb")[0] == 0
    entry = tmp_path / "lb" / "fixed1325" / "runs" / load_run(run).id
    assert gzip.decompress((entry / "trajectories.jsonl.gz").read_bytes()) == (run / "trajectories.jsonl").read_bytes()
    copy = tmp_path / "copy"
    shutil.copytree(entry, copy)
    assert load_run(copy).trajectories == load_run(run).trajectories


def test_verify_generates_a_sample_again_byte_for_byte_and_names_what_differs(tmp_path, tiny_llama, bm25):
    """A real (tiny, random) model's entry: a sample generated again is identical; an entry whose stored text was
    touched is named with the question and the turn; another checkpoint is refused before anything runs."""
    from cfbench.harness.backends.hf import HFBackend
    from cfbench.harness.checkpoints import resolve

    suite_file = tmp_path / "six.jsonl"
    suite_file.write_text("".join((TASKS_DIR / "suites" / "mini.jsonl").read_text().splitlines(keepends=True)[:6]))
    backend = HFBackend.load(resolve(str(tiny_llama)))
    evaluate(load_suite(str(suite_file)), backend, bm25, Knobs(max_new_tokens=24), tmp_path / "run", batch_size=4)
    assert cli("leaderboard", "add", tmp_path / "run", "--root", tmp_path / "lb")[0] == 0
    (entry,) = (tmp_path / "lb" / "six" / "runs").iterdir()

    code, lines = cli("leaderboard", "verify", entry, "--sample", 3, "--seed", 1)
    assert code == 0 and lines[-1] == f"{entry}: 3 of 3 sampled questions (seed 1) generated again byte-identical"

    rows = [json.loads(line) for line in gzip.decompress((entry / "trajectories.jsonl.gz").read_bytes()).decode().splitlines()]
    rows[2]["turns"][0]["generated"] += " "  # the prediction it gives is unchanged, so rescoring cannot see it
    (entry / "trajectories.jsonl.gz").write_bytes(gzip.compress(jsonl_text(rows).encode()))
    code, lines = cli("leaderboard", "verify", entry, "--sample", 6)  # before it: progress lines (and the model load's own)
    assert code == 2 and [line for line in lines if line.startswith("error")] == lines[-1:]
    assert lines[-1] == (
        f"error: {entry}: 5 of 6 sampled questions (seed 0) generated again byte-identical; differ: {rows[2]['id']}: turn 1 generated"
    )

    code, lines = cli("leaderboard", "verify", entry, "--sample", 2, "--ckpt", "smollm2-135m")
    assert code == 2 and lines[-1].startswith("error: checkpoint 'smollm2-135m' has weights sha256")
    assert lines[-1].endswith("pass the run's checkpoint with --ckpt")


def test_a_run_named_like_html_is_text_in_the_readme(tmp_path):
    root = tmp_path / "lb"
    run = write_run(tmp_path / "run", ACCURACY, seed=1)
    assert cli("leaderboard", "add", run, "--root", root, "--name", "<script>alert(1)</script> | x")[0] == 0
    assert cli("leaderboard", "build", "--root", root)[0] == 0
    readme = (root / "fixed1325" / "README.md").read_text()
    assert "<script>" not in readme and "&lt;script&gt;alert(1)&lt;/script&gt; \\| x" in readme


def test_a_record_holding_nan_is_refused_not_copied_into_an_entry(tmp_path):
    """A record written before retrieval scores were checked may hold a bare NaN, which is not JSON: add refuses it."""
    run = write_run(tmp_path / "run", ACCURACY, seed=1)
    text = (run / "trajectories.jsonl").read_text().splitlines(keepends=True)
    text[3] = text[3].replace('"doc_scores": []', '"doc_scores": [NaN]')
    (run / "trajectories.jsonl").write_text("".join(text))
    code, lines = cli("leaderboard", "add", run, "--root", tmp_path / "lb")
    where = run / "trajectories.jsonl"
    assert code == 2 and lines == [f"error: {where}:4: not valid JSON (NaN is not a JSON value); fix or remove the line"]
    assert not (tmp_path / "lb").exists()
