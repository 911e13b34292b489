"""The table `cfbench eval` prints at the end of a run (harness/report.py): the leaderboard's benchmark order, Cover-EM with
the leaderboard's own bootstrap interval, the share answered and the searches per question."""

from __future__ import annotations

import io
import json

from rich.console import Console

from cfbench.harness import stats
from cfbench.harness.jsonl import iter_rows, read_bytes
from cfbench.harness.metrics import BENCHMARKS, GROUPS, MULTI_HOP
from cfbench.harness.report import results_table
from leaderboard_runs import question_ids, write_run

ACCURACY = {"nq": 0.45, "triviaqa": 0.6, "popqa": 0.35, "hotpotqa": 0.3, "2wikimultihopqa": 0.3, "musique": 0.1, "bamboogle": 0.2}


def _table(results: dict, rows: list[dict], width: int = 80) -> dict[str, list[str]]:
    """Row label -> cells of the table as an 80-column pipe shows it (a wrapped cell would split a row in two)."""
    console = Console(width=width, file=io.StringIO())
    console.print(results_table(results, rows))
    lines = console.file.getvalue().splitlines()
    return {cells[1].strip(): [c.strip() for c in cells[2:-1]] for cells in (line.split("│") for line in lines) if len(cells) == 8}


def test_the_table_follows_the_leaderboard_and_fits_80_columns(tmp_path):
    ids = list(reversed(question_ids(6)))  # the file lists bamboogle first: the table still shows nq first
    run = write_run(tmp_path / "run", ACCURACY, seed=5, ids=ids)
    results = json.loads((run / "results.json").read_text())
    rows = [row for _, row in iter_rows(run / "trajectories.jsonl", read_bytes(run / "trajectories.jsonl"))]
    rows[0]["prediction"] = None  # one unanswered bamboogle question with two searches
    rows[0]["turns"] = [{"action": "search"}, {"action": "search"}, {"action": "invalid"}]
    table = _table(results, rows)
    assert list(table) == [*BENCHMARKS, *GROUPS]
    spread = stats.intervals(rows)
    for name, (n, cover, interval, *_) in table.items():
        assert cover == f"{100 * results['scores'][name]['cover_em']:.1f}" and n == str(results["scores"][name]["n"])
        assert interval == f"[{100 * spread[name]['cover_em']['lo']:.1f}, {100 * spread[name]['cover_em']['hi']:.1f}]"
    assert table["bamboogle"][3:] == [f"{100 * 5 / 6:.1f}%", f"{2 / 6:.2f}"]
    assert table["multi_hop"][3:] == [f"{100 * 23 / 24:.1f}%", f"{2 / 24:.2f}"] and len(MULTI_HOP) == 4
    assert table["nq"][3:] == ["100.0%", "0.00"]
