"""The policy objective of docs/protocol.md §5.1, shared by every trained role.

    L = -(1/|E|) sum_e A_e (1/|T_e|) sum_{t in T_e} log pi(y_t | y_<t, q_e)
    A_e = (r_e - mean_g(e)) / (std_g(e) + 1e-6)

T_e is the set of the episode's trained tokens: the model's own text. Retrieved `<information>`
passages and the loop's invalid-action notes are masked out, so they get no gradient. A single
update per rollout batch is taken, so no importance ratio or clipping appears.
"""

from __future__ import annotations

import torch

EPS = 1e-6


def group_advantages(rewards: torch.Tensor, groups: list[int]) -> torch.Tensor:
    """(r - group mean) / (group std + 1e-6), std with Bessel's correction as torch.std (TRL, verl).

    A group of one episode has no baseline to compare with, so its advantage is 0.
    """
    ids = torch.tensor(groups)
    out = torch.zeros_like(rewards, dtype=torch.float32)
    for g in ids.unique():
        members = ids == g
        r = rewards[members].float()
        if len(r) > 1:
            out[members] = (r - r.mean()) / (r.std() + EPS)
    return out


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """log pi(y_t | y_<t) for t = 1..T-1, shape [batch, T-1] (position t-1 predicts token t)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def policy_loss(logprobs: torch.Tensor, trained: torch.Tensor, advantages: torch.Tensor, episodes: int | None = None) -> torch.Tensor:
    """The objective over the rows given; `episodes` = |E| when rows are one micro-batch of a larger E.

    logprobs and trained are [rows, T-1]: trained marks the target tokens that are the model's own
    text (1) rather than prompt, padding or retrieved text (0).
    """
    trained = trained.to(logprobs.dtype)
    per_episode = (logprobs * trained).sum(-1) / trained.sum(-1).clamp(min=1)
    return -(advantages * per_episode).sum() / (episodes or len(advantages))
