"""PNG curves of a training run's metrics.jsonl (matplotlib, no display needed).

Every run's curves.png has the reward and the signal panel: the share of prompt groups whose rewards
differ (the only ones GRPO learns from), with the steps that took no optimizer step (every advantage
zero, skip_empty_updates) marked. Both loops rewrite it after every step, so a run without signal
shows it within minutes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

SEARCH_R1_PANELS = (
    ("reward", "mean reward"),
    ("signal", "groups with signal (x: no optimizer step)"),
    ("loss", "loss"),
    ("response_tokens", "response tokens"),
    ("searches_per_rollout", "searches per rollout"),
    ("well_formed", "well-formed share"),
    ("wall", "seconds per step"),
)
SELF_EVOLUTION_PANELS = (
    ("proposer_reward", "proposer reward"),
    ("solver_reward", "main solver reward"),
    ("signal", "groups with signal, the phase's role (x: no optimizer step)"),
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
    grid = (len(panels) + 2) // 3
    fig, axes = plt.subplots(grid, 3, figsize=(12, 3 * grid), constrained_layout=True)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (key, title) in zip(axes.flat, panels):
        if key == "signal":
            ax.plot(
                steps,
                [math.nan if r.get("groups_with_signal") is None else r["groups_with_signal"] for r in rows],
                marker="o",
                markersize=3,
            )
            skipped = [r["step"] for r in rows if r.get("optimizer_step") is False]
            ax.plot(skipped, [0.0] * len(skipped), "x", color="tab:red", label="no optimizer step")
            ax.set_ylim(-0.05, 1.05)
        elif key == "wall":
            ax.bar(steps, [r["rollout_s"] for r in rows], label="rollout")
            ax.bar(steps, [r["update_s"] for r in rows], bottom=[r["rollout_s"] for r in rows], label="update")
            ax.legend(fontsize=8)
        else:
            ax.plot(steps, [math.nan if r.get(key) is None else r[key] for r in rows], marker="o", markersize=3)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
    fig.savefig(out, dpi=100, metadata={"Software": None})
    plt.close(fig)
