"""The rich tables printed at the end of a run: one row per benchmark, then the three averages."""

from __future__ import annotations

from rich.table import Table

from cfbench.harness.metrics import GROUPS, METRICS


def results_table(results: dict) -> Table:
    suite = results["suite"]
    table = Table(title=f"{results['model']['model']} on {suite['name']} ({suite['n']} questions)")
    table.add_column("benchmark")
    table.add_column("n", justify="right")
    for metric in METRICS:
        table.add_column(metric, justify="right")
    scores = results["scores"]

    def add(name: str, label: str) -> None:
        table.add_row(label, str(scores[name]["n"]), *(f"{100 * scores[name][m]:.1f}" for m in METRICS))

    for name in [n for n in scores if n not in GROUPS]:
        add(name, name)
    table.add_section()
    for name in [n for n in scores if n in GROUPS]:
        add(name, f"[bold]{name}[/bold]")
    return table
