"""The rich tables printed at the end of a run: one row per benchmark, then the three averages."""

from __future__ import annotations

from rich.table import Table

from harness.metrics import GROUPS, METRICS


def results_table(results: dict) -> Table:
    suite = results["suite"]
    table = Table(title=f"{results['model']['model']} on {suite['name']} ({suite['n']} questions)")
    table.add_column("benchmark")
    table.add_column("n", justify="right")
    for metric in METRICS:
        table.add_column(metric, justify="right")
    scores = results["scores"]
    for name, row in scores.items():
        if name in GROUPS and name == next(g for g in GROUPS if g in scores):
            table.add_section()
        cells = [f"{100 * row[m]:.1f}" for m in METRICS]
        label = f"[bold]{name}[/bold]" if name in GROUPS else name
        table.add_row(label, str(row["n"]), *cells)
    return table
