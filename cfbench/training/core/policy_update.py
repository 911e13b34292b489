"""A role's update on one step's rollouts: the objective of docs/protocol.md §5.1 with the config's recipe terms.

config.objective (training/config/sections.py) sets them. With its defaults (kl_coef 0, one update
per batch) the update is the plain objective in one optimizer step, as the cpu-smoke configs run.
kl_coef > 0 adds the KL to `reference`, a frozen copy of the starting weights built once per run
by `reference_model`. updates_per_batch N > 1 splits the rollouts into N mini-batches in order and
takes an optimizer step on each, the policy term clipped on the ratio to the log-probs the policy
gave the same tokens before the first step (the sampling policy: verl's old_log_prob). Advantages
are computed once over the whole batch, and the learning-rate schedule steps once per batch, as
verl's actor does.

With the config's `skip_empty_updates`, a step whose advantages are all zero (no group with signal, on
any process) runs no forward or backward pass and takes no optimizer or scheduler step: AdamW would
otherwise keep moving the weights along its first moment (each earlier update applied again, decayed
by beta1 a step) and advance its moments and step count, and a warmup would spend a step on nothing.
In a step that does have signal, the knob also skips the forward and backward passes of micro-batches
whose advantages are all zero (one update per batch, one process, no dropout): with no KL term their loss is 0 x
log-probs, whose gradient is exactly zero, so the weights come out bit for bit as with the passes run
(test_training_policy_update), and at the cpu recipe's share of groups with signal (about a third) the
update costs about a third. The loss and sampler_gap are then over the micro-batches that ran.

Rollouts' tokens are the ids their engine sampled (core/episodes.py); where the engine gave their
log-probs, `sampler_gap` reports the mean |log pi - log pi_sampler| over them before the first step:
about 0 when trainer and sampler compute the same policy, larger when their numerics (or weights) drift.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cfbench.harness.checkpoints import load_model
from cfbench.training.core.episodes import Episode, collate, sampled_logprobs
from cfbench.training.core.objective import group_advantages, groups_with_signal, kl_per_token, recipe_loss, token_logprobs


@dataclass(frozen=True)
class UpdateStats:
    loss: float  # the objective, summed over micro-batches; the mean over the batch's optimizer steps
    grad_norm: float  # before clipping; the mean over the optimizer steps
    kl: float | None = None  # mean per-token KL to the reference over trained tokens (kl_coef > 0)
    clipped: float | None = None  # share of trained tokens whose ratio was outside [1 - clip_eps, 1 + clip_eps] (updates_per_batch > 1)
    ratio: float | None = None  # mean ratio pi / pi_old over the last mini-batch's trained tokens (updates_per_batch > 1)
    sampler_gap: float | None = None  # mean |log pi - log pi_sampler| before the first step, where the engine gave log-probs
    groups_with_signal: float = 0.0  # share of this process's prompt groups whose rewards differ (objective.groups_with_signal)
    optimizer_step: bool = True  # False: every advantage was zero and skip_empty_updates left the role untouched

    def metrics(self) -> dict:
        """The metrics.jsonl columns: loss, grad_norm, groups_with_signal, optimizer_step, and each recipe term's statistic when on."""
        extra = {"kl": self.kl, "clipped": self.clipped, "ratio": self.ratio, "sampler_gap": self.sampler_gap}
        return {
            "loss": self.loss,
            "grad_norm": self.grad_norm,
            "groups_with_signal": self.groups_with_signal,
            "optimizer_step": self.optimizer_step,
            **{k: v for k, v in extra.items() if v is not None},
        }


def reference_model(config, location, accelerator):
    """The frozen reference of the KL term (the starting weights at `location`), or None when kl_coef is 0."""
    if not config.objective.kl_coef:
        return None
    from transformers import AutoModelForCausalLM

    model = load_model(AutoModelForCausalLM, location, torch.float32).to(accelerator.device).eval().requires_grad_(False)
    if config.sharding:
        from cfbench.training.core.sharding import shard

        shard(model, config.bf16)
    return model


def mini_batches(n: int, parts: int) -> list[range]:
    """Episodes 0..n-1 cut in order into `parts` ranges whose sizes differ by at most one; empty ones left out."""
    bounds = [n * i // parts for i in range(parts + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def update(role, accelerator, episodes: list[Episode], config, pad_id: int, reference=None) -> UpdateStats:
    """The step's update of `role` (a learner.Learner) on `episodes`, in micro-batches of config.micro_batch rows."""
    model, objective, device = role.model, config.objective, accelerator.device
    rewards, groups = [e.reward for e in episodes], [e.group for e in episodes]
    advantages = group_advantages(torch.tensor(rewards), groups).to(device)
    signal = groups_with_signal(rewards, groups)
    if config.skip_empty_updates and not _any_advantage(advantages, accelerator):
        return UpdateStats(0.0, 0.0, groups_with_signal=signal, optimizer_step=False)  # the objective is exactly 0 (no KL term)
    batches = mini_batches(len(episodes), objective.updates_per_batch)
    step = config.micro_batch
    parts = [[(first, min(first + step, part.stop)) for first in range(part.start, part.stop, step)] for part in batches]
    if config.skip_empty_updates and len(parts) == 1 and accelerator.num_processes == 1 and not _drops_out(model):
        # one part: it holds a non-zero advantage (checked above), so its optimizer step is taken as before;
        # with several processes every one must run the same backward passes (their gradients are reduced in them);
        # with dropout a pass left out would leave the random stream, and so the later passes' masks, elsewhere
        parts = [[span for span in parts[0] if advantages[span[0] : span[1]].any()]]
    rows = {span: [t.to(device) for t in collate(episodes[span[0] : span[1]], pad_id)] for part in parts for span in part}
    sampled = {span: sampled_logprobs(episodes[span[0] : span[1]]).to(device) for span in parts[0]}
    old = _frozen_logprobs(model, rows, config) if len(parts) > 1 else {}
    ref = _frozen_logprobs(reference, rows, config) if reference is not None else {}
    model.train()
    losses, norms, tally = [], [], _Tally()
    for part, batch in zip(parts, batches):
        size, total = len(batch), 0.0
        for span in part:
            ids, attention, trained = rows[span]
            logprobs = token_logprobs(model, ids, attention, config.temperature, config.logprob_chunk)
            loss = recipe_loss(
                logprobs,
                trained,
                advantages[span[0] : span[1]],
                episodes=size,
                old_logprobs=old.get(span),
                clip_eps=objective.clip_eps,
                ref_logprobs=ref.get(span),
                kl_type=objective.kl_type,
                kl_coef=objective.kl_coef,
            )
            accelerator.backward(loss)
            total += loss.item()
            tally.add(logprobs.detach(), trained, old.get(span), ref.get(span), objective, last=part is parts[-1])
            if part is parts[0]:
                tally.gap(logprobs.detach(), trained, sampled[span])
        norms.append(float(accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)))
        role.optimizer.step()
        role.optimizer.zero_grad()
        losses.append(total)
    role.scheduler.step()
    return UpdateStats(sum(losses) / len(losses), sum(norms) / len(norms), **tally.stats(bool(ref), bool(old)), groups_with_signal=signal)


def _drops_out(model) -> bool:
    """Whether a training forward pass draws random numbers: a dropout layer or the attention's dropout above 0."""
    layers = any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
    return layers or bool(getattr(getattr(model, "config", None), "attention_dropout", 0.0))


def _any_advantage(advantages: torch.Tensor, accelerator) -> bool:
    """Whether any process has a non-zero advantage: every process then takes the step (their gradients are reduced together)."""
    flag = (advantages != 0).any().to(torch.float32).reshape(1)
    if accelerator.num_processes > 1:
        flag = accelerator.reduce(flag, "sum")
    return bool(flag.item() > 0)


@torch.no_grad()
def _frozen_logprobs(model, rows: dict, config) -> dict:
    """Each micro-batch's token log-probs under `model` as it is now, in eval mode (no dropout), without gradients."""
    was_training = model.training
    model.eval()
    out = {
        span: token_logprobs(model, ids, attention, config.temperature, config.logprob_chunk) for span, (ids, attention, _) in rows.items()
    }
    model.train(was_training)
    return out


class _Tally:
    """Sums over trained tokens for UpdateStats' kl, clipped and ratio."""

    def __init__(self) -> None:
        self.tokens = self.kl = self.clipped = self.last_tokens = self.last_ratio = 0.0
        self.gap_tokens = self.gap_sum = 0.0

    def gap(self, logprobs, trained, sampled) -> None:
        known = (trained.bool() & ~sampled.isnan()).to(logprobs.dtype)
        self.gap_tokens += float(known.sum())
        self.gap_sum += float(((logprobs - sampled.nan_to_num()).abs() * known).sum())

    def add(self, logprobs, trained, old, ref, objective, *, last: bool) -> None:
        mask = trained.to(logprobs.dtype)
        count = float(mask.sum())
        self.tokens += count
        if ref is not None:
            self.kl += float((kl_per_token(logprobs, ref, objective.kl_type) * mask).sum())
        if old is not None:
            ratio = (logprobs - old).exp()
            self.clipped += float((((ratio - 1).abs() > objective.clip_eps).to(mask.dtype) * mask).sum())
            if last:
                self.last_tokens += count
                self.last_ratio += float((ratio * mask).sum())

    def stats(self, with_kl: bool, with_ratio: bool) -> dict:
        tokens = max(self.tokens, 1.0)
        out = {"kl": self.kl / tokens} if with_kl else {}
        if with_ratio:
            out |= {"clipped": self.clipped / tokens, "ratio": self.last_ratio / max(self.last_tokens, 1.0)}
        if self.gap_tokens:
            out["sampler_gap"] = self.gap_sum / self.gap_tokens
        return out
