"""Training sequences from rollouts: token ids plus the mask of what the model itself wrote.

A sequence is the chat prompt, then each turn's generated tokens followed by its observation
(retrieved passages or the invalid-action note, tokenised on its own). The model's own tokens are
the ids its engine sampled (`rollout_episode`), never a re-encoding of their text, which can
tokenise differently; synthesised text (the warm start's) is tokenised piece by piece
(`encode_episode`). The mask marks exactly the model's own tokens and nothing it merely read.

Generation sees only the last max_context_tokens tokens of a trajectory, so a turn generated from a
cut context was conditioned on less than the whole sequence: the episode ends before it (`cut`),
rather than training those tokens on a context the sampler never saw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cfbench.harness.agent import Trajectory
from cfbench.harness.backends.tokens import PromptTokens


@dataclass(frozen=True)
class Episode:
    ids: list[int]
    trained: list[int]  # 1 where ids[i] is the model's own text
    reward: float
    group: int  # episodes of one prompt share a group (its GRPO baseline)
    sampled_logprobs: list[float] | None = None  # per id: the sampler's log-prob of a trained id, nan where unknown or not trained
    cut: bool = False  # turns generated from a cut context were left out


def encode_episode(tokens: PromptTokens, prompt: str, turns: list[dict], reward: float, group: int) -> Episode:
    """A sequence of written (not sampled) turns: every piece of text tokenised on its own."""
    ids = tokens.encode(prompt)
    trained = [0] * len(ids)
    for turn in turns:
        for text, own in ((turn["generated"], 1), (turn.get("observation", ""), 0)):
            piece = tokens.text_ids(text)
            ids += piece
            trained += [own] * len(piece)
    return Episode(ids, trained, reward, group)


def rollout_episode(tokens: PromptTokens, trajectory: Trajectory, reward: float, group: int, max_context_tokens: int) -> Episode:
    """A sampled trajectory's sequence: the engine's own ids and log-probs for its turns (the text's ids where an
    engine gave none), up to the first turn generated from a context longer than max_context_tokens."""
    ids = tokens.encode(trajectory.prompt)
    trained, logprobs = [0] * len(ids), [math.nan] * len(ids)
    context, cut = trajectory.prompt, False
    for turn, completion in zip(trajectory.turns, trajectory.completions, strict=True):
        if len(tokens.encode(context)) > max_context_tokens:  # what the engine cut (PromptTokens.context)
            cut = True
            break
        own = list(completion.ids) if completion.ids is not None else tokens.text_ids(turn["generated"])
        known = completion.ids is not None and completion.logprobs is not None
        observation = turn.get("observation", "")
        seen = tokens.text_ids(observation)
        ids += own + seen
        trained += [1] * len(own) + [0] * len(seen)
        logprobs += (list(completion.logprobs) if known else [math.nan] * len(own)) + [math.nan] * len(seen)
        context += turn["generated"] + observation
    return Episode(ids, trained, reward, group, logprobs, cut)


def collate(episodes: list[Episode], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids, attention mask, and the trained mask of the targets ([rows, T-1])."""
    width = max(len(e.ids) for e in episodes)
    ids = torch.full((len(episodes), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(episodes), width), dtype=torch.long)
    trained = torch.zeros((len(episodes), width), dtype=torch.long)
    for row, e in enumerate(episodes):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        attention[row, : len(e.ids)] = 1
        trained[row, : len(e.ids)] = torch.tensor(e.trained)
    return ids, attention, trained[:, 1:]


def sampled_logprobs(episodes: list[Episode]) -> torch.Tensor:
    """The sampler's log-probs of the targets, [rows, T-1] like collate's trained mask; nan where unknown."""
    width = max(len(e.ids) for e in episodes)
    out = torch.full((len(episodes), width), math.nan)
    for row, e in enumerate(episodes):
        if e.sampled_logprobs is not None:
            out[row, : len(e.ids)] = torch.tensor(e.sampled_logprobs)
    return out[:, 1:]
