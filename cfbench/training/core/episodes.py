"""Training sequences from rollouts: token ids plus the mask of what the model itself wrote.

A sequence is the chat prompt, then each turn's generated text followed by its observation
(retrieved passages or the invalid-action note). Each piece is tokenised on its own and the ids
concatenated, so the mask marks exactly the model's own tokens and nothing it merely read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cfbench.harness.backends.tokens import PromptTokens


@dataclass(frozen=True)
class Episode:
    ids: list[int]
    trained: list[int]  # 1 where ids[i] is the model's own text
    reward: float
    group: int  # episodes of one prompt share a group (its GRPO baseline)


def encode_episode(tokens: PromptTokens, prompt: str, turns: list[dict], reward: float, group: int) -> Episode:
    ids = tokens.encode(prompt)
    trained = [0] * len(ids)
    for turn in turns:
        for text, own in ((turn["generated"], 1), (turn.get("observation", ""), 0)):
            piece = tokens.text_ids(text)
            ids += piece
            trained += [own] * len(piece)
    return Episode(ids, trained, reward, group)


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
