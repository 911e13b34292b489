"""The table printed at the end of a run: one row per benchmark in the leaderboard's order, then the averages.

Cover-EM with the 95% bootstrap interval the leaderboard shows (harness/stats.py, same seed and draws), the share of
questions answered and the searches per question (an average's: over its benchmarks' questions); EM, substring EM and
F1 are in results.json. Six columns, so the table fits the 80 columns a pipe or a log gets.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from cfbench.harness import stats
from cfbench.harness.evaluate import run_stats
from cfbench.harness.metrics import GROUPS


def results_table(results: dict, rows: list[dict]) -> Table:
    """`rows`: the run's trajectory rows (benchmark, scores, prediction, turns)."""
    suite = results["suite"]
    limit = suite.get("limit")
    subset = f", first {limit} per benchmark: not for a leaderboard" if limit is not None else ""
    table = Table(title=escape(f"{results['model']['model']} on {suite['name']} ({suite['n']} questions{subset})"))
    for column in ("benchmark", "n", "cover_em", "95% CI", "answered", "searches/q"):
        table.add_column(column, justify="left" if column == "benchmark" else "right", no_wrap=True)
    scores = results["scores"]
    spread = stats.intervals(rows)  # benchmarks in the leaderboard's order, then the averages
    members = {name: GROUPS.get(name, (name,)) for name in spread}

    def behaviour(name: str) -> tuple[str, str]:
        mine = run_stats([r for r in rows if r["benchmark"] in members[name]])
        return f"{100 * mine['answered']:.1f}%", f"{mine['searches_per_question']:.2f}"

    for name in spread:
        if name == next(iter(n for n in spread if n in GROUPS), None):
            table.add_section()
        s, ci = scores[name], spread[name]["cover_em"]
        interval = f"[{100 * ci['lo']:.1f}, {100 * ci['hi']:.1f}]"
        label = f"[bold]{escape(name)}[/bold]" if name in GROUPS else escape(name)
        table.add_row(label, str(s["n"]), f"{100 * s['cover_em']:.1f}", escape(interval), *behaviour(name))
    return table
