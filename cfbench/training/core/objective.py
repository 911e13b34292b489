"""The policy objective of docs/protocol.md §5.1, shared by every trained role.

    L = -(1/|E|) sum_e A_e (1/|T_e|) sum_{t in T_e} log pi(y_t | y_<t, q_e)
    A_e = (r_e - mean_g(e)) / (std_g(e) + 1e-6)

T_e is the set of the episode's trained tokens: the model's own text. Retrieved `<information>`
passages and the loop's invalid-action notes are masked out, so they get no gradient. That is the
whole objective with a config's default recipe terms (one update per batch, no KL); `recipe_loss`
adds Search-R1's terms when a config's `objective` section sets them (training/core/policy_update.py).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

EPS = 1e-6


def group_advantages(rewards: torch.Tensor, groups: list[int]) -> torch.Tensor:
    """(r - group mean) / (group std + 1e-6), std with Bessel's correction as torch.std (TRL, verl).

    A group of one episode has no baseline to compare with, so its advantage is 0; so is that of a group
    whose rewards are all equal, exactly (a mean of equal floats can round off them, and the rounding
    divided by a std of the same size would be an advantage of about 0.01 out of nothing).
    """
    ids = torch.tensor(groups)
    out = torch.zeros_like(rewards, dtype=torch.float32)
    for g in ids.unique():
        members = ids == g
        r = rewards[members].float()
        if len(r) > 1 and r.max() > r.min():
            out[members] = (r - r.mean()) / (r.std() + EPS)
    return out


def groups_with_signal(rewards: list[float], groups: list[int]) -> float:
    """The share of groups whose rewards are not all equal (non-zero variance): the only groups GRPO learns from."""
    by_group: dict[int, set[float]] = {}
    for r, g in zip(rewards, groups, strict=True):
        by_group.setdefault(g, set()).add(r)
    return sum(len(v) > 1 for v in by_group.values()) / len(by_group) if by_group else 0.0


def token_logprobs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0, chunk: int | None = None
) -> torch.Tensor:
    """log pi(y_t | y_<t) for t = 1..T-1, shape [batch, T-1] (position t-1 predicts token t).

    pi is the distribution rollouts were sampled from, softmax(logits / temperature), as verl's actor
    computes it: the ratio and the KL then compare like with like at any sampling temperature.
    With `chunk`, the output head and log-softmax run `chunk` positions at a time and are recomputed
    in backward (torch.utils.checkpoint), so the [batch, T, vocabulary] logits never exist whole: at
    a 248k vocabulary that tensor, not the model, is the update's largest (cfbench train --plan).
    Hand-written because the fused kernels that do this (Liger's linear cross-entropy) are CUDA-only.
    """
    if chunk is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
        return _target_logprobs(logits, input_ids[:, 1:], temperature)
    # Through the model's own forward with no position's logits kept (an empty index), not its decoder alone: a sharded
    # model (core/sharding.py) gathers its embeddings and head in that forward, and the head's gradient is reduced with it.
    none = torch.zeros(0, dtype=torch.long, device=input_ids.device)
    out = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=none, output_hidden_states=True, use_cache=False)
    hidden = out.hidden_states[-1][:, :-1]  # after the final norm: transformers puts last_hidden_state there
    del out  # every layer's hidden states
    head, targets = getattr(model, "module", model).get_output_embeddings(), input_ids[:, 1:]  # a DDP-wrapped model's own head
    parts = [
        checkpoint(
            lambda h, t: _target_logprobs(head(h), t, temperature), hidden[:, s : s + chunk], targets[:, s : s + chunk], use_reentrant=False
        )
        for s in range(0, targets.shape[1], chunk)
    ]
    return torch.cat(parts, dim=1)


def _target_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


# Recipe terms of Search-R1's train_grpo.sh (verl): KL to a frozen reference and PPO's clipped ratio.
# With kl_coef = 0 and no old log-probs, recipe_loss is the plain objective of docs/protocol.md §5.1.

KL_TYPES = ("kl", "low_var_kl")


def kl_per_token(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from the sampled tokens' log-probs (Schulman's k1 and k3).

    "kl" (k1) = log pi - log pi_ref; "low_var_kl" (k3) = r - log r - 1 with r = pi_ref / pi, clamped
    as verl's core_algos.kl_penalty does (log r to [-20, 20], the estimate to [-10, 10]) so one
    token the policy has moved far from cannot dominate the batch.
    """
    if kind == "kl":
        return logprobs - ref_logprobs
    if kind == "low_var_kl":
        log_ratio = (ref_logprobs - logprobs).clamp(-20, 20)
        return (log_ratio.exp() - log_ratio - 1).clamp(-10, 10)
    raise ValueError(f"kl type must be one of {', '.join(KL_TYPES)}, got {kind!r}")


def clipped_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, clip_eps: float) -> torch.Tensor:
    """Per-token PPO loss -min(r A, clip(r, 1-eps, 1+eps) A), r = pi / pi_old; advantages is [rows].

    old_logprobs are the sampling policy's (detached); they make a second update on the same batch an
    importance-weighted, clipped step instead of a biased on-policy one.
    """
    ratio = (logprobs - old_logprobs.detach()).exp()
    a = advantages.unsqueeze(-1)
    return -torch.minimum(ratio * a, ratio.clamp(1 - clip_eps, 1 + clip_eps) * a)


def recipe_loss(
    logprobs: torch.Tensor,
    trained: torch.Tensor,
    advantages: torch.Tensor,
    *,
    episodes: int | None = None,
    old_logprobs: torch.Tensor | None = None,
    clip_eps: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    kl_type: str = "low_var_kl",
    kl_coef: float = 0.0,
) -> torch.Tensor:
    """The objective plus the optional recipe terms: token mean per episode, then sum / |E|.

    old_logprobs given: the policy term is the clipped surrogate (N updates per batch, each micro-batch
    passing its rows' sampling log-probs). kl_coef > 0 (needs ref_logprobs): + kl_coef x the episode's
    mean per-token KL to the frozen reference, as a loss term (verl's use_kl_loss), not a reward penalty.
    """
    if old_logprobs is None:
        per_token = -(logprobs * advantages.unsqueeze(-1))
    else:
        per_token = clipped_surrogate(logprobs, old_logprobs, advantages, clip_eps)
    if kl_coef:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs (the frozen reference's log-probs of the same tokens)")
        per_token = per_token + kl_coef * kl_per_token(logprobs, ref_logprobs.detach(), kl_type)
    trained = trained.to(logprobs.dtype)
    per_episode = (per_token * trained).sum(-1) / trained.sum(-1).clamp(min=1)
    return per_episode.sum() / (episodes or len(advantages))
