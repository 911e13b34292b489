"""PNG curves of a training run's metrics.jsonl (matplotlib, no display needed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

SEARCH_R1_PANELS = (
    ("reward", "mean reward"),
    ("loss", "loss"),
    ("response_tokens", "response tokens"),
    ("searches_per_rollout", "searches per rollout"),
    ("well_formed", "well-formed share"),
    ("wall", "seconds per step"),
)
SELF_EVOLUTION_PANELS = (
    ("proposer_reward", "proposer reward"),
    ("agreement", "agreement with adopted label (A)"),
    ("admitted", "admitted questions"),
    ("loss", "loss of the updated role"),
    ("response_tokens", "proposer response tokens"),
    ("wall", "seconds per step"),
)


def plot_curves(metrics: Path, out: Path, panels=SEARCH_R1_PANELS) -> None:
    """One panel per (key, title); a step without a value (None) leaves a gap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6), constrained_layout=True)
    for ax, (key, title) in zip(axes.flat, panels):
        if key == "wall":
            ax.bar(steps, [r["rollout_s"] for r in rows], label="rollout")
            ax.bar(steps, [r["update_s"] for r in rows], bottom=[r["rollout_s"] for r in rows], label="update")
            ax.legend(fontsize=8)
        else:
            ax.plot(steps, [math.nan if r.get(key) is None else r[key] for r in rows], marker="o", markersize=3)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
    fig.savefig(out, dpi=100, metadata={"Software": None})
    plt.close(fig)
