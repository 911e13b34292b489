"""What a training run shows of its signal: the live columns of `cfbench train` and the curves.png panels."""

import json

from cfbench.training.cli import _describe, _signal_fields
from cfbench.training.core.plots import SELF_EVOLUTION_PANELS, plot_curves

SEARCH_R1_ROWS = [
    {"step": 1, "reward": 0.1, "groups_with_signal": 0.5, "optimizer_step": True, "loss": -0.01, "response_tokens": 40.0,
     "searches_per_rollout": 1.0, "well_formed": 1.0, "rollout_s": 3.0, "update_s": 2.0},
    {"step": 2, "reward": 0.0, "groups_with_signal": 0.0, "optimizer_step": False, "loss": 0.0, "response_tokens": 38.0,
     "searches_per_rollout": 1.2, "well_formed": 0.9, "rollout_s": 3.0, "update_s": 0.0},
]  # fmt: skip


def test_the_live_columns_show_reward_signal_and_the_steps_that_updated():
    assert _signal_fields(SEARCH_R1_ROWS[:1]) == {"reward": "0.100", "signal": "50%", "updated": "1/1"}
    assert _signal_fields(SEARCH_R1_ROWS) == {"reward": "0.000", "signal": "0%", "updated": "1/2"}
    assert "groups with signal 0%  optimizer step no (every advantage 0)" in _describe(SEARCH_R1_ROWS[1])
    proposer = {"step": 3, "phase": "proposer", "round": 1, "proposer_reward": 0.4, "solver_reward": None, "format": 0.5, "admitted": 1,
                "tasks": 4, "agreement": None, "loss": None, "groups_with_signal": None, "optimizer_step": None,
                "rollout_s": 1.0, "update_s": 0.0}  # fmt: skip
    assert _signal_fields([proposer]) == {"reward": "0.400", "signal": "-", "updated": "0/1"}
    assert "groups with signal -  optimizer step -" in _describe(proposer)


def test_curves_have_reward_and_signal_panels_and_read_runs_recorded_before_them(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    old = {k: v for k, v in SEARCH_R1_ROWS[0].items() if k not in ("groups_with_signal", "optimizer_step")} | {"step": 0}
    metrics.write_text("".join(json.dumps(r) + "\n" for r in [old, *SEARCH_R1_ROWS]))
    plot_curves(metrics, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [key for key, _ in SELF_EVOLUTION_PANELS][:3] == ["proposer_reward", "solver_reward", "signal"]
