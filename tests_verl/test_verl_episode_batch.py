"""A role's episodes as the DataProto its verl update reads (training/verl_engine/episode_batch.py), checked against
cfbench's own sequences (core/episodes.rollout_episode of the real in-process rollout) and read back by verl's own
code: its padding removal and its response slicing (workers/utils/padding.py) and compute_advantage."""

import math

import pytest
import torch
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from cfbench.training.core.episodes import rollout_episode
from cfbench.training.core.objective import group_advantages
from cfbench.training.verl_engine.episode_batch import episode_batch
from cfbench.training.verl_engine.recipe import ADVANTAGE
from tests_verl.conftest import KNOBS


def test_every_row_is_its_episode_token_for_token_with_its_group(in_process_rollout):
    tokens, _, _, trajectories = in_process_rollout
    # groups as the loop makes them: a solver's per question (3 answers each here), rewards mixed within a group
    episodes = [rollout_episode(tokens, t, float(i % 2), i // 3, KNOBS.max_context_tokens) for i, t in enumerate(trajectories)]
    pad = tokens.tokenizer.pad_token_id or 0
    batch = episode_batch(episodes, pad, temperature=1.0)
    b = batch.batch
    width_p = b["prompts"].shape[1]
    assert b["input_ids"].shape[1] == width_p + b["responses"].shape[1]
    for row, (t, e) in enumerate(zip(trajectories, episodes, strict=True)):
        real = b["attention_mask"][row].bool()
        prompt = tokens.encode(t.prompt)  # the split is the chat prompt, as the agent loop cuts a trajectory
        assert b["input_ids"][row][real].tolist() == e.ids
        assert b["prompts"][row][real[:width_p]].tolist() == prompt and not real[: width_p - len(prompt)].any()  # left-padded
        n = len(e.ids) - len(prompt)
        assert b["responses"][row][:n].tolist() == e.ids[len(prompt) :] and not real[width_p + n :].any()  # right-padded
        assert b["response_mask"][row].tolist() == e.trained[len(prompt) :] + [0] * (b["responses"].shape[1] - n)
        assert b["position_ids"][row][real].tolist() == list(range(len(e.ids)))
        lps = [0.0 if math.isnan(p) else p for p in e.sampled_logprobs[len(prompt) :]]
        assert b["rollout_log_probs"][row][:n].tolist() == pytest.approx(lps)
        assert b["token_level_rewards"][row].sum().item() == e.reward and b["token_level_rewards"][row][n - 1] == e.reward
    assert list(batch.non_tensor_batch["uid"]) == [str(e.group) for e in episodes]
    assert batch.meta_info["global_token_num"] == [len(e.ids) for e in episodes]

    # verl's own readers: the padding-free form keeps every token, and a per-position output sliced back to the response
    # is aligned with it (position t-1 predicts response token t, as verl's log-probs are)
    data = left_right_2_no_padding(batch.to_tensordict())
    assert "input_ids" in batch.batch.keys()  # the conversion leaves the DataProto whole for the next one
    assert data["input_ids"].values().tolist() == [i for e in episodes for i in e.ids]
    previous = no_padding_2_padding(data["input_ids"], data)
    for row, e in enumerate(episodes):
        start = len(tokens.encode(trajectories[row].prompt))
        assert previous[row][: len(e.ids) - start].tolist() == e.ids[start - 1 : -1]

    # and cfbench_grpo through verl's compute_advantage: each row its group's advantage, on its own tokens only
    advantages = compute_advantage(batch, adv_estimator=ADVANTAGE).batch["advantages"]
    expected = group_advantages(torch.tensor([e.reward for e in episodes]), [e.group for e in episodes])
    torch.testing.assert_close(advantages, expected.unsqueeze(-1) * b["response_mask"])
    assert expected.abs().sum() > 0
