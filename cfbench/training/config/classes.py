"""The config of each treatment, as a class: the knobs a configs/NAME.SCALE.json file holds and their rules.

    TrainingConfig        treatment, scale, note, model (every file)
      BaseConfig          + steps (0: the starting model saved as checkpoint-0), seed
      WarmStartConfig     + the LoRA SFT's data, mix, lora, optimiser, schedule and batch (training/warmstart.py)
      RLConfig            + rollouts, optimiser, reward and the objective's recipe terms, shared by the GRPO treatments
        SearchR1Config       + train_set, sources
        SelfEvolutionConfig  + the rounds, source pool and proposer/solver knobs (training/selfevolve)

Fields are in the shipped files' key order (base and warm-start; the RL files follow RLConfig's), so
`config_text` writes a shipped file back byte for byte.
A run writes its config to config.json and into every checkpoint (training/trainer.py); `read_run_config`
reads one back, so a resume compares typed configs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from cfbench.harness.errors import CfbenchError
from cfbench.harness.protocol import Knobs
from cfbench.training.config.choices import AUX_BUDGETS, CONTROLS, FORMATS, aux_updates_now
from cfbench.training.config.schema import (
    ANY_TEXT,
    FLAG,
    FRACTION,
    INT_FROM_0,
    INT_FROM_1,
    NUMBER_FROM_0,
    OPEN_UNIT,
    TEXT,
    Checked,
    KnobError,
    Rule,
    knob,
    one_of,
    or_absent,
    parse,
    section,
)
from cfbench.training.config.sections import Lora, Mix, Objective, Reward
from cfbench.training.core.sharding import SHARDINGS

SELF_EVOLUTION = {
    "dr-zero": (False, False),
    "msv": (True, False),
    "crossfit": (False, True),
    "msv-crossfit": (True, True),
}  # (msv, crossfit)
LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup")
POSITIVE = Rule("a number > 0", lambda v: NUMBER_FROM_0.holds(v) and v > 0)


@dataclass(frozen=True, kw_only=True)
class TrainingConfig(Checked):
    TREATMENT: ClassVar[str]  # what the file's treatment knob must say

    treatment: str | None = knob(or_absent(TEXT), None, omit_default=True)
    scale: str = knob(TEXT)
    note: str = knob(ANY_TEXT)
    model: str = knob(TEXT)

    def check(self) -> None:
        self.check_treatment()

    def start_models(self) -> tuple[str, ...]:
        """Every model the run starts a role from (each is checked loadable before the run directory is made)."""
        return (self.model,)

    def check_treatment(self) -> None:
        if self.treatment != self.TREATMENT:
            raise KnobError("treatment", repr(self.TREATMENT), self.treatment)


@dataclass(frozen=True, kw_only=True)
class BaseConfig(TrainingConfig):
    TREATMENT = "base"

    steps: int = knob(INT_FROM_0)
    seed: int = knob(INT_FROM_0)


@dataclass(frozen=True, kw_only=True)
class WarmStartConfig(TrainingConfig):
    """LoRA SFT with TRL's SFTTrainer: AdamW, lr_scheduler after warmup_steps, clipping at max_grad_norm."""

    TREATMENT = "warm-start"

    data: str = knob(TEXT)
    mix: Mix = section(Mix)
    epochs: int = knob(INT_FROM_1)
    lora: Lora = section(Lora)
    learning_rate: float = knob(OPEN_UNIT)
    lr_scheduler: str = knob(one_of(LR_SCHEDULERS))
    warmup_steps: int = knob(INT_FROM_0)
    weight_decay: float = knob(NUMBER_FROM_0)
    max_grad_norm: float = knob(POSITIVE)
    batch_size: int = knob(INT_FROM_1)
    grad_accumulation: int = knob(INT_FROM_1)
    max_length: int = knob(INT_FROM_1)
    gradient_checkpointing: bool = knob(FLAG)
    bf16: bool = knob(FLAG)
    save_every: int = knob(INT_FROM_1)
    seed: int = knob(INT_FROM_0)
    data_sha256: str | None = knob(or_absent(TEXT), None, omit_default=True)  # set by the run: a resume refuses changed data


@dataclass(frozen=True, kw_only=True)
class ProposerWarmStartConfig(WarmStartConfig):
    """The proposer's own warm start: the same SFT, continued from the warm start on proposer trajectories
    (knob data: warmstart-proposer, with the 2-hop compositions), so 2-hop proposals parse; it makes the
    bundled `smollm2-135m-propose`, which the self-evolution configs name as proposer_model."""

    TREATMENT = "warm-start-proposer"


SAMPLING_TEMPERATURE = Rule("a number in (0, 2] (rollouts are sampled)", lambda v: POSITIVE.holds(v) and v <= 2)


@dataclass(frozen=True, kw_only=True)
class RLConfig(TrainingConfig):
    """The GRPO treatments: AdamW with a constant learning rate after a linear warmup, clipping at max_grad_norm.
    warmup_ratio (verl's lr_warmup_steps_ratio) sets the warmup as a share of a role's updates when
    warmup_steps is 0; objective holds the loss's recipe terms (sections.Objective); a lora section
    trains an adapter per role instead of every weight."""

    retriever: str = knob(TEXT)
    steps: int | None = knob(or_absent(INT_FROM_0), None, omit_default=True)
    prompts_per_step: int = knob(INT_FROM_1)
    samples_per_prompt: int = knob(INT_FROM_1)
    rollout_rows: int | None = knob(or_absent(INT_FROM_1), None, omit_default=True)  # trajectories sampled at once (core/rollouts.py)
    temperature: float = knob(SAMPLING_TEMPERATURE)
    learning_rate: float = knob(OPEN_UNIT)
    warmup_steps: int = knob(INT_FROM_0)
    warmup_ratio: float = knob(Rule("a number in [0, 1)", lambda v: FRACTION.holds(v) and v < 1), 0.0, omit_default=True)
    weight_decay: float = knob(NUMBER_FROM_0)
    max_grad_norm: float = knob(POSITIVE)
    micro_batch: int = knob(INT_FROM_1)
    gradient_checkpointing: bool = knob(FLAG, False, omit_default=True)  # recompute each layer's activations in backward
    logprob_chunk: int | None = knob(or_absent(INT_FROM_1), None, omit_default=True)  # positions per log-softmax (objective.py)
    save_every: int = knob(INT_FROM_1)
    seed: int = knob(INT_FROM_0)
    knobs: Knobs = section(Knobs)
    reward: Reward = section(Reward)
    objective: Objective = section(Objective, default=Objective(), omit_default=True)
    # a step whose advantages are all zero takes no optimizer or scheduler step (core/policy_update.py); absent: false, as runs before it
    skip_empty_updates: bool = knob(FLAG, False, omit_default=True)
    lora: Lora | None = section(Lora, default=None, omit_default=True)  # train LoRA adapters over the frozen model (core/learner.py)
    sharding: str | None = knob(or_absent(one_of(SHARDINGS)), None, omit_default=True)  # fsdp: ZeRO-3 across processes (core/sharding.py)
    bf16: bool = knob(FLAG, False, omit_default=True)  # a sharded role computes in bfloat16 over float32 master weights
    # URL of an OpenAI-compatible server (vLLM, cfbench serve-model) that samples the rollouts, each role's adapter synced (core/served.py)
    rollout_server: str | None = knob(or_absent(TEXT), None, omit_default=True)

    def check(self) -> None:
        super().check()
        if self.samples_per_prompt < 2:
            raise KnobError("samples_per_prompt", "at least 2 (GRPO needs a group to compare with)", self.samples_per_prompt)
        if self.bf16 and not self.sharding:
            raise CfbenchError("knob bf16 sets the precision of sharded roles: set sharding to 'fsdp' or remove bf16")
        if self.sharding and self.lora:
            raise CfbenchError("knob sharding: LoRA roles train a few MB each and are not sharded; remove sharding or the lora section")
        if self.rollout_server and not self.lora:
            raise CfbenchError(
                "knob rollout_server: only LoRA adapters are synced to a rollout server (vLLM's runtime LoRA loading); "
                "add a lora section or remove rollout_server"
            )
        if self.skip_empty_updates and self.objective.kl_coef:
            raise CfbenchError(
                f"knob skip_empty_updates: with objective.kl_coef {self.objective.kl_coef} a step with zero advantages still pulls "
                "toward the reference, so it is not empty; set kl_coef to 0 or skip_empty_updates to false"
            )
        if self.warmup_steps and self.warmup_ratio:
            raise CfbenchError(
                f"knobs warmup_steps ({self.warmup_steps}) and warmup_ratio ({self.warmup_ratio}) are both set; set one to 0"
            )

    def warmup(self, updates: int) -> int:
        """Scheduler steps of linear warmup for a role that takes `updates` steps in the run (verl rounds the ratio down)."""
        return self.warmup_steps or int(self.warmup_ratio * updates)

    def for_role(self, role: str) -> RLConfig:
        """The config role `role` samples and updates with (every role's is this one, except where a subclass says)."""
        return self

    def start_model(self, role: str) -> str:
        """The model role `role` starts from (core/learner.py start_roles)."""
        return self.model


@dataclass(frozen=True, kw_only=True)
class SearchR1Config(RLConfig):
    TREATMENT = "search-r1"

    train_set: str = knob(TEXT)
    sources: tuple[str, ...] = knob(
        Rule("a non-empty list of source names", lambda v: isinstance(v, tuple) and bool(v) and all(TEXT.holds(s) for s in v))
    )

    def check(self) -> None:
        super().check()
        if self.steps is None:
            raise KnobError("steps", "an integer >= 0", None)
        if self.prompts_per_step % self.objective.updates_per_batch:
            raise KnobError(
                "objective.updates_per_batch",
                f"a divisor of prompts_per_step ({self.prompts_per_step}), so each mini-batch holds whole groups",
                self.objective.updates_per_batch,
            )


def _hop_weights(v) -> bool:
    return isinstance(v, tuple) and len(v) == 4 and all(NUMBER_FROM_0.holds(w) for w in v) and sum(v) > 0


@dataclass(frozen=True, kw_only=True)
class SelfEvolutionConfig(RLConfig):
    """One file for the four treatments; `load_config` adds treatment, msv, crossfit and steps (absent from the file)."""

    corpus: str = knob(TEXT)
    source_pool: int = knob(Rule("an integer >= 0 (0: the whole corpus)", INT_FROM_0.holds))
    hop_weights: tuple[float, ...] = knob(Rule("4 non-negative weights for hops 1..4 with a positive sum", _hop_weights))
    rounds: int = knob(INT_FROM_1)
    proposer_steps: int = knob(INT_FROM_1)
    solver_steps: int = knob(INT_FROM_1)
    format_weight: float = knob(FRACTION)
    proposer_format: str = knob(one_of(FORMATS))
    control: str = knob(one_of(CONTROLS))
    aux_budget: str = knob(one_of(AUX_BUDGETS))
    msv: bool | None = knob(or_absent(FLAG), None, omit_default=True)
    crossfit: bool | None = knob(or_absent(FLAG), None, omit_default=True)
    allow_eval_corpus: bool = knob(FLAG, False, omit_default=True)  # absent (not false) otherwise: older runs resume
    # the proposer's own starting model (the bundled smollm2-135m-propose at cpu scale); absent: model, as runs before it
    proposer_model: str | None = knob(or_absent(TEXT), None, omit_default=True)
    # the proposer's sampling temperature, for its rollouts and its update's log-probs; the solvers keep temperature;
    # absent: temperature, as runs before it
    proposer_temperature: float | None = knob(or_absent(SAMPLING_TEMPERATURE), None, omit_default=True)

    @property
    def scheduled_steps(self) -> int:
        return self.rounds * (self.proposer_steps + self.solver_steps)

    def check_treatment(self) -> None:
        if self.treatment is None:  # the shared file
            if (self.msv, self.crossfit) != (None, None):
                raise CfbenchError("knobs msv and crossfit follow from the treatment (training/treatments.py); remove them")
        elif SELF_EVOLUTION.get(self.treatment) != (self.msv, self.crossfit):
            raise KnobError("treatment", f"one of {', '.join(SELF_EVOLUTION)} with its msv and crossfit flags", self.treatment)

    def check(self) -> None:
        super().check()
        if self.steps is not None and self.steps > self.scheduled_steps:
            raise KnobError("steps", f"at most rounds x (proposer_steps + solver_steps) = {self.scheduled_steps}", self.steps)
        if self.proposer_model and self.rollout_server:
            raise CfbenchError(
                f"knob proposer_model {self.proposer_model!r}: a rollout server serves every role's adapter over the one model it "
                "loaded; remove rollout_server or proposer_model"
            )
        if self.crossfit is False and (self.control != "none" or self.aux_budget != "full"):
            raise CfbenchError(
                f"control {self.control!r} and aux_budget {self.aux_budget!r} need auxiliary solvers: "
                "use them with crossfit or msv-crossfit"
            )

    def for_role(self, role: str) -> SelfEvolutionConfig:
        """The config `role` samples and updates with: the proposer's temperature is proposer_temperature when set."""
        if role == "proposer" and self.proposer_temperature is not None:
            return replace(self, temperature=self.proposer_temperature)
        return self

    def start_model(self, role: str) -> str:
        return self.proposer_model if role == "proposer" and self.proposer_model else self.model

    def start_models(self) -> tuple[str, ...]:
        return (self.model, self.proposer_model) if self.proposer_model else (self.model,)

    def updates_of(self, role: str) -> int:
        """Optimizer-schedule steps role `role` takes in the whole schedule (its warmup is a share of them)."""
        if role == "proposer":
            return self.rounds * self.proposer_steps
        if role == "main":
            return self.rounds * self.solver_steps
        return self.rounds * sum(aux_updates_now(self.aux_budget, i) for i in range(self.solver_steps))


TREATMENT_CONFIGS: dict[str, type[TrainingConfig]] = {
    "base": BaseConfig,
    "search-r1": SearchR1Config,
    "warm-start": WarmStartConfig,
    "warm-start-proposer": ProposerWarmStartConfig,
    **dict.fromkeys(SELF_EVOLUTION, SelfEvolutionConfig),
}


def read_run_config(path: Path) -> TrainingConfig:
    """The config.json a training run wrote, as its treatment's class (a record without its treatment is refused)."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        data = None
    cls = TREATMENT_CONFIGS.get(data.get("treatment")) if isinstance(data, dict) else None
    if cls is None:
        raise CfbenchError(f"{path}: not a training config (no JSON object with a known treatment); pass a `cfbench train` run")
    return parse(cls, data, str(path))
