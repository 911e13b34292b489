"""Ranks that respect uncertainty: runs with identical predictions share one row and one rank, runs no
run beats significantly share rank 1, a named reference gets the deltas, bold needs significance, and
scores-only entries stand apart. Runs are synthetic (tests/leaderboard_runs.py)."""

from __future__ import annotations

import csv
import json

from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness import stats
from cfbench.leaderboard.build import build
from cfbench.leaderboard.store import STORED_TRAJECTORIES, add, content_id, load_run
from leaderboard_runs import write_run

STRONG = {"nq": 0.6, "triviaqa": 0.7, "popqa": 0.5, "hotpotqa": 0.5, "2wikimultihopqa": 0.45, "musique": 0.3, "bamboogle": 0.4}
WEAK = {b: v / 3 for b, v in STRONG.items()}


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def store(tmp_path, root, name, accuracy, seed, **labels):
    run = load_run(write_run(tmp_path / name, accuracy, seed=seed, model=name))
    add(run, root, {"name": name, **labels})
    return run.id


def test_runs_with_identical_predictions_share_one_row_and_rank(tmp_path):
    root = tmp_path / "lb"
    # Same seed and accuracy: the same predictions question by question; a different model name, so a different run.
    twin_a = store(tmp_path, root, "Dr. Zero", STRONG, seed=1, treatment="Dr. Zero", scale="135M", config="cpu")
    twin_b = store(tmp_path, root, "CrossFit", STRONG, seed=1, treatment="CrossFit", scale="135M", config="cpu")
    other = store(tmp_path, root, "Search-R1", STRONG, seed=2)
    weak = store(tmp_path, root, "weak", WEAK, seed=3)
    assert len({twin_a, twin_b, other, weak}) == 4
    (board,) = build([root / "fixed1325"])
    (table,) = board["tables"]
    rank = {m["id"]: row["rank"] for row in table["runs"] for m in row["members"]}
    assert rank[twin_a] == rank[twin_b]  # the acceptance test: identical predictions, one rank
    twins = next(row for row in table["runs"] if row["identical_predictions"])
    assert twins["label"] == "CrossFit = Dr. Zero" and [m["id"] for m in twins["members"]] == sorted(
        [twin_b, twin_a], key=[twin_b, twin_a].index
    )
    assert len(table["runs"]) == 3  # four runs, three distinct sets of predictions
    # Strong and Search-R1 differ only by chance (same accuracy): both rank 1; three runs are significantly above weak.
    assert rank[twin_a] == rank[other] == 1 and rank[weak] == 4
    assert {p["a"] for p in table["pairwise"]} | {p["b"] for p in table["pairwise"]} == {row["id"] for row in table["runs"]}

    readme = (root / "fixed1325" / "README.md").read_text()
    assert "| 1 | CrossFit = Dr. Zero: identical predictions | CrossFit / Dr. Zero | 135M | cpu |" in readme
    rows = list(csv.DictReader((root / "fixed1325" / "results.csv").read_text().splitlines()))
    by_id = {r["id"]: r for r in rows}
    assert by_id[twin_a]["rank"] == by_id[twin_b]["rank"] == "1" and by_id[twin_a]["row"] == "CrossFit = Dr. Zero"
    assert by_id[twin_a]["identical_predictions_with"] == twin_b and by_id[twin_a]["config"] == "cpu"
    tex = (root / "fixed1325" / "results.tex").read_text()
    assert "1 & CrossFit = Dr. Zero: identical predictions & CrossFit / Dr. Zero & 135M & cpu &" in tex
    html = (root / "fixed1325" / "index.html").read_text()
    assert html.count("<circle ") == 3  # the twins are one point
    assert "CrossFit = Dr. Zero: identical predictions" in html


def test_the_reference_gets_the_deltas_and_is_kept_for_rescore(tmp_path):
    root = tmp_path / "lb"
    start = store(tmp_path, root, "Warm start", WEAK, seed=3)
    store(tmp_path, root, "trained", STRONG, seed=1)
    code, lines = cli("leaderboard", "build", "--root", root, "--reference", "Warm start")
    assert code == 0, lines
    assert json.loads((root / "fixed1325" / "leaderboard.json").read_text()) == {"reference": start}
    board = json.loads((root / "fixed1325" / "results.json").read_text())
    (table,) = board["tables"]
    assert board["reference"] == start and table["reference"] == start
    top, ref = table["runs"]
    assert ref["reference"] and ref["vs_reference"] is None and top["rank"] == 1 and ref["rank"] == 2
    mine = stats.paired(load_run(root / "fixed1325" / "runs" / top["id"]).rows, load_run(root / "fixed1325" / "runs" / start).rows)
    assert top["vs_reference"]["avg7"] == {k: mine["avg7"]["cover_em"][k] for k in ("delta", "lo", "hi", "p")}
    readme = (root / "fixed1325" / "README.md").read_text()
    assert f"- Reference: Warm start ({start}); Δ and p are each row minus the reference" in readme
    assert "| Δ 7-avg vs reference | p |" in readme and "(reference)" in readme
    # Without --reference, build and rescore use the stored choice, so the tables stay the same.
    before = (root / "fixed1325" / "README.md").read_bytes()
    assert cli("leaderboard", "build", "--root", root)[0] == 0 and (root / "fixed1325" / "README.md").read_bytes() == before
    assert cli("leaderboard", "rescore", "--root", root)[0] == 0
    # A name that matches no run is one line naming what to give, and nothing is written.
    code, lines = cli("leaderboard", "build", "--root", root, "--reference", "nobody")
    assert code == 2 and len(lines) == 1 and "reference 'nobody' names 0 stored runs" in lines[0]
    assert json.loads((root / "fixed1325" / "leaderboard.json").read_text()) == {"reference": start}


def test_bold_only_where_a_value_is_significantly_above_every_other(tmp_path):
    root = tmp_path / "lb"
    store(tmp_path, root, "a", STRONG, seed=1)
    store(tmp_path, root, "b", STRONG, seed=2)  # as good as a: no one is significantly best anywhere
    (board,) = build([root / "fixed1325"])
    (table,) = board["tables"]
    assert table["bold"] == dict.fromkeys(table["benchmarks"] + table["groups"])
    assert "**" not in (root / "fixed1325" / "README.md").read_text()
    assert [row["rank"] for row in table["runs"]] == [1, 1]


def test_scores_only_entries_are_listed_apart_neither_ranked_nor_tested(tmp_path):
    root = tmp_path / "lb"
    store(tmp_path, root, "verified", WEAK, seed=3)
    run = load_run(write_run(tmp_path / "legacy", STRONG, seed=1, model="legacy"))
    entry, _ = add(run, root, {"name": "legacy"})
    (entry / STORED_TRAJECTORIES).unlink()
    entry.rename(entry.parent / content_id(run.results, run.rows, None))
    (board,) = build([root / "fixed1325"])
    (table,) = board["tables"]
    assert [row["label"] for row in table["runs"]] == ["verified"] and table["runs"][0]["rank"] == 1 and table["pairwise"] == []
    (only,) = board["scores_only"]
    assert only["label"] == "legacy" and "rank" not in only and only["differs_from_ranked"] == []
    readme = (root / "fixed1325" / "README.md").read_text()
    assert readme.index("## Ranked runs") < readme.index("## Scores only: not ranked, not tested") < readme.index("| legacy |")
