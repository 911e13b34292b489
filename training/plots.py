"""PNG curves of a training run's metrics.jsonl (matplotlib, no display needed)."""

from __future__ import annotations

import json
from pathlib import Path

PANELS = (("reward", "mean reward"), ("loss", "loss"), ("response_tokens", "response tokens"),
          ("searches_per_rollout", "searches per rollout"), ("well_formed", "well-formed share"), ("wall", "seconds per step"))


def plot_curves(metrics: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6), constrained_layout=True)
    for ax, (key, title) in zip(axes.flat, PANELS):
        if key == "wall":
            ax.bar(steps, [r["rollout_s"] for r in rows], label="rollout")
            ax.bar(steps, [r["update_s"] for r in rows], bottom=[r["rollout_s"] for r in rows], label="update")
            ax.legend(fontsize=8)
        else:
            ax.plot(steps, [r[key] for r in rows], marker="o", markersize=3)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
    fig.savefig(out, dpi=100, metadata={"Software": None})
    plt.close(fig)
