"""cfbench's GRPO advantage as a verl advantage estimator, `cfbench_grpo` (recipe.ADVANTAGE).

verl's own `grpo` gives a group of one episode its raw score as advantage (mean 0, std 1 by
convention); cfbench gives it 0, since there is nothing to compare it with (core/objective.py's
group_advantages, which this calls, so the two engines share one definition). Every other group
gets (r - mean) / (std + 1e-6), std with Bessel's correction, as both do. The advantage is
broadcast over the response's tokens and zeroed where the response mask is 0 (observations,
padding), as verl's estimators return it.

Imports verl: only the verl path imports this module (recipe.SETUP_HOOK runs `register` in every Ray
worker, and importing the module registers it in the importing process).
"""

from __future__ import annotations

import numpy as np
import torch
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

from cfbench.training.core.objective import group_advantages
from cfbench.training.verl_engine.recipe import ADVANTAGE


def cfbench_grpo_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray, config=None, **_: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both [rows, response tokens]: each row's outcome reward against its group's (uid's)."""
    scores = token_level_rewards.sum(dim=-1)
    groups = {uid: g for g, uid in enumerate(dict.fromkeys(index.tolist()))}
    if config is not None and not config.get("norm_adv_by_std_in_grpo", True):
        raise ValueError("cfbench_grpo divides by the group's std (cfbench's objective): set algorithm.norm_adv_by_std_in_grpo=true")
    advantages = group_advantages(scores, [groups[uid] for uid in index.tolist()]).to(scores.dtype)
    per_token = advantages.unsqueeze(-1) * response_mask
    return per_token, per_token


def register() -> None:
    """Register cfbench_grpo in this process (idempotent: a Ray worker may run it after the import did)."""
    if ADV_ESTIMATOR_REGISTRY.get(ADVANTAGE) is not cfbench_grpo_advantage:
        register_adv_est(ADVANTAGE)(cfbench_grpo_advantage)


register()
