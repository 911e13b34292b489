"""A role's episodes (core/episodes.py) as the verl DataProto its update reads.

The layout is the one verl's agent loop hands its trainer (experimental/agent_loop/agent_loop.py,
`_agent_loop_postprocess` and `_postprocess`), so verl's compute_log_prob, compute_advantage and
update_actor read it as they read their own rollouts:
    prompts            [rows, P]  the prompt's ids, left-padded
    responses          [rows, R]  everything after it (each turn's sampled ids and its observation), right-padded
    input_ids, attention_mask, position_ids   [rows, P + R]  the two together, positions counted over real tokens
    response_mask      [rows, R]  1 on the model's own tokens (the episode's `trained`), 0 on observations and padding
    rollout_log_probs  [rows, R]  the sampler's log-probs, 0 where unknown or masked (as the agent loop writes them)
    token_level_scores, token_level_rewards   [rows, R]  the episode's reward on its last response token
    uid (non-tensor)   the episode's group: the proposer's hop count, a solver's question
An episode's response starts at its first trained token, which is where its prompt ends: the agent loop
cuts a trajectory at the chat prompt, and the first id after it is the first turn's first sampled id.

Hand-written rather than verl's: verl pads inside its agent-loop worker (a Ray actor holding the
tokenizer and the rollout config), while cfbench's loop holds the episodes it built itself
(`rollout_episode`, whose sequences the agent loop returns token for token). Imports verl.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from verl import DataProto
from verl.utils.model import compute_position_id_with_mask

from cfbench.training.core.episodes import Episode


def prompt_length(episode: Episode) -> int:
    """Where the episode's response starts: its first trained token (its whole length when it has none)."""
    return next((i for i, own in enumerate(episode.trained) if own), len(episode.ids))


def episode_batch(episodes: list[Episode], pad_id: int, temperature: float) -> DataProto:
    """The episodes as one DataProto, row i episode i, with meta_info as verl's trainer sets it before an update."""
    splits = [prompt_length(e) for e in episodes]
    width_p, width_r = max(splits), max(1, max(len(e.ids) - s for e, s in zip(episodes, splits)))
    rows = len(episodes)
    prompts = torch.full((rows, width_p), pad_id, dtype=torch.long)
    responses = torch.full((rows, width_r), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((rows, width_p), dtype=torch.long)
    response_attention = torch.zeros((rows, width_r), dtype=torch.long)
    response_mask = torch.zeros((rows, width_r), dtype=torch.long)
    logprobs = torch.zeros((rows, width_r), dtype=torch.float32)
    scores = torch.zeros((rows, width_r), dtype=torch.float32)
    for row, (e, s) in enumerate(zip(episodes, splits)):
        n = len(e.ids) - s
        prompts[row, width_p - s :] = torch.tensor(e.ids[:s], dtype=torch.long)
        prompt_mask[row, width_p - s :] = 1
        responses[row, :n] = torch.tensor(e.ids[s:], dtype=torch.long)
        response_attention[row, :n] = 1
        response_mask[row, :n] = torch.tensor(e.trained[s:], dtype=torch.long)
        sampled = e.sampled_logprobs[s:] if e.sampled_logprobs is not None else [math.nan] * n
        logprobs[row, :n] = torch.tensor([0.0 if math.isnan(p) else p for p in sampled], dtype=torch.float32)
        scores[row, max(n - 1, 0)] = e.reward
    attention = torch.cat([prompt_mask, response_attention], dim=1)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention,
            "position_ids": compute_position_id_with_mask(attention),
            "response_mask": response_mask,
            "rollout_log_probs": logprobs,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),  # no KL penalty in the reward (algorithm.use_kl_in_reward false)
        },
        non_tensors={"uid": np.array([str(e.group) for e in episodes], dtype=object)},
        meta_info={"temperature": temperature, "global_token_num": attention.sum(dim=-1).tolist(), "images_seqlens": []},
    )
