"""The nested sections of the training configs: reward, objective (the policy loss's recipe terms), LoRA, SFT mix."""

from __future__ import annotations

from dataclasses import dataclass, fields

from cfbench.harness.errors import CfbenchError
from cfbench.training.config.schema import (
    FRACTION,
    INT_FROM_0,
    INT_FROM_1,
    NUMBER_FROM_0,
    OPEN_UNIT,
    Checked,
    Rule,
    knob,
    one_of,
    or_absent,
)
from cfbench.training.core.objective import KL_TYPES
from cfbench.training.core.rewards import KINDS, reward


@dataclass(frozen=True, kw_only=True)
class Reward(Checked):
    """An outcome reward (training/core/rewards.py); the em+format weights are written only where a file sets them."""

    kind: str = knob(one_of(KINDS))
    structure: float | None = knob(or_absent(FRACTION), None, omit_default=True)
    final_format: float | None = knob(or_absent(FRACTION), None, omit_default=True)

    def of(self, prediction: str, golden: list[str], turns: list[dict]) -> float:
        weights = {k: v for k, v in (("structure", self.structure), ("final_format", self.final_format)) if v is not None}
        return reward(self.kind, prediction, golden, turns, **weights)


@dataclass(frozen=True, kw_only=True)
class Objective(Checked):
    """The recipe terms of the policy loss (training/core/objective.py: recipe_loss).

    kl_coef > 0 adds kl_coef x the per-token KL (`kl` = k1, `low_var_kl` = k3) to a frozen copy of
    the starting weights, as a loss term. updates_per_batch N > 1 splits each step's rollouts into N
    mini-batches in order (verl's train_batch_size / ppo_mini_batch_size), one optimizer step each,
    with the ratio to the sampling policy clipped to [1 - clip_eps, 1 + clip_eps]. The defaults are
    the study's plain objective (one unclipped update, no KL); a config at the defaults does not
    write the section, so runs recorded before it existed read back equal.
    """

    kl_coef: float = knob(NUMBER_FROM_0, 0.0)
    kl_type: str = knob(one_of(KL_TYPES), "low_var_kl")
    clip_eps: float = knob(OPEN_UNIT, 0.2)
    updates_per_batch: int = knob(INT_FROM_1, 1)


@dataclass(frozen=True, kw_only=True)
class Lora(Checked):
    r: int = knob(INT_FROM_1)
    alpha: float = knob(Rule("a number > 0", lambda v: NUMBER_FROM_0.holds(v) and v > 0))
    dropout: float = knob(Rule("a number in [0, 1)", lambda v: FRACTION.holds(v) and v < 1))
    target_modules: tuple[str, ...] = knob(
        Rule("a non-empty list of module names", lambda v: isinstance(v, tuple) and bool(v) and all(isinstance(m, str) and m for m in v))
    )


_COUNT = Rule('an integer >= 0 or "all" (or absent)', lambda v: v is None or v == "all" or INT_FROM_0.holds(v))


@dataclass(frozen=True, kw_only=True)
class Mix(Checked):
    """Examples of each warm-start trajectory kind (training/warmstart.py); a kind left out is not trained on."""

    single: int | str | None = knob(_COUNT, None, omit_default=True)
    reformulate: int | str | None = knob(_COUNT, None, omit_default=True)
    two_hop: int | str | None = knob(_COUNT, None, omit_default=True, key="two-hop")
    propose_1: int | str | None = knob(_COUNT, None, omit_default=True, key="propose-1")
    propose_2: int | str | None = knob(_COUNT, None, omit_default=True, key="propose-2")
    compose_2: int | str | None = knob(_COUNT, None, omit_default=True, key="compose-2")

    def check(self) -> None:
        if not self.counts():
            raise CfbenchError("knob mix must be a non-empty map of trajectory kind -> number of examples, got {}")

    def counts(self) -> dict[str, int | str]:
        """kind (as the data names it) -> examples wanted, for the kinds the mix sets."""
        return {f.metadata["key"] or f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
