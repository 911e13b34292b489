"""cfbench's GRPO advantage registered in verl (`cfbench_grpo`): a one-episode group gets 0 where verl's `grpo`
gives it its raw score; every other group gets what both give, through verl's own compute_advantage."""

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

from cfbench.training.core.objective import group_advantages
from cfbench.training.verl_engine.advantage import cfbench_grpo_advantage, register
from cfbench.training.verl_engine.recipe import ADVANTAGE


def batch():
    # rows 0-2 one prompt (rewards 1, 0, 1), row 3 a group of one (reward 1), rows 4-5 a tie (0, 0)
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 1, 0]], dtype=torch.float32)
    last = mask.shape[1] - 1 - torch.argmax(mask.flip(-1), dim=-1)  # a row's reward sits on its last response token
    token_rewards = torch.zeros_like(mask)
    token_rewards[torch.arange(len(rewards)), last] = torch.tensor(rewards)
    uids = np.array(["a", "a", "a", "b", "c", "c"], dtype=object)
    return token_rewards, mask, uids, rewards


def test_registered_under_its_name_and_idempotent():
    register()
    assert get_adv_estimator_fn(ADVANTAGE) is cfbench_grpo_advantage


def test_one_episode_groups_get_zero_others_what_verls_grpo_gives():
    token_rewards, mask, uids, rewards = batch()
    data = DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": mask}, non_tensors={"uid": uids}, meta_info={}
    )
    ours = compute_advantage(data, adv_estimator=ADVANTAGE).batch["advantages"]
    verls = compute_advantage(
        DataProto.from_dict(tensors={"token_level_rewards": token_rewards, "response_mask": mask}, non_tensors={"uid": uids}, meta_info={}),
        adv_estimator="grpo",
    ).batch["advantages"]
    assert torch.equal(ours[3], torch.zeros(4))  # the group of one: nothing to compare with
    torch.testing.assert_close(verls[3], mask[3] / (1 + 1e-6))  # verl's grpo: its raw score (1, over std 1 + eps) on every token
    others = [0, 1, 2, 4, 5]
    torch.testing.assert_close(ours[others], verls[others], rtol=1e-6, atol=1e-6)  # float32, the same reductions
    # and it is core/objective.py's advantage, per row, on the response tokens only
    expected = group_advantages(torch.tensor(rewards), [0, 0, 0, 1, 2, 2])
    torch.testing.assert_close(ours, expected.unsqueeze(-1) * mask)
    assert ours[0, 2] == 0 and ours[0, 0] > 0 > ours[1, 0]  # masked tokens get none; above the mean +, below -


def test_refuses_an_unnormalised_grpo():
    token_rewards, mask, uids, _ = batch()
    with pytest.raises(ValueError, match="norm_adv_by_std_in_grpo"):
        cfbench_grpo_advantage(token_rewards, mask, uids, config={"norm_adv_by_std_in_grpo": False})
