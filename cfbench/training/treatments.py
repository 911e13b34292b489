"""The treatments the study compares, each with a config file per scale (training/configs/NAME.SCALE.json;
the four self-evolution treatments share self-evolution.SCALE.json and differ by their msv/crossfit flags),
and the warm start that makes the bundled `smollm2-135m-search` (training/warmstart.py).

Every knob lives in the config file and is copied into each checkpoint, so a checkpoint says how it
was made. `--steps` may extend a run and `--save-every` trade disk for resume points; the
self-evolution treatments also take `--control`, `--aux-budget` and `--corpus`, and every treatment
`--set KNOB=VALUE` for any other knob (a pilot's learning rate, say: config/schema.py with_settings); all
are recorded like every knob, and a resumed run must be given the same ones (trainer.check_config).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import shown
from cfbench.training.config.classes import SELF_EVOLUTION, TREATMENT_CONFIGS, SelfEvolutionConfig, TrainingConfig, WarmStartConfig
from cfbench.training.config.schema import parse, read_json, with_settings
from cfbench.training.selfevolve.sources import refuse_eval_corpus

CONFIGS = Path(__file__).parent / "configs"
TREATMENTS = {
    "base": "the untrained model, saved as checkpoint-0",
    "search-r1": "GRPO on NQ + HotpotQA training questions, exact-match outcome reward",
    "dr-zero": "coupled self-evolution: proposer questions from source passages, rewarded by the main solver's answers",
    "msv": "Dr. Zero with MSV admission (source-aware and source-blind majorities must agree)",
    "crossfit": "Dr. Zero with fold-split auxiliary solvers scoring the other fold's questions",
    "msv-crossfit": "MSV admission and CrossFit scoring together",
    "warm-start": "supervised fine-tuning (LoRA) on protocol-v1 trajectories synthesised from training data",
    "warm-start-proposer": "the warm start continued on proposer trajectories with 2-hop compositions: the self-evolution proposer's start",
}
__all__ = ["CONFIGS", "SELF_EVOLUTION", "TREATMENTS", "config_file", "load_config", "scales"]


# knobs the command line sets by their own options, so that a --set cannot contradict them
_OWN_OPTIONS = {
    "treatment": "--treatment",
    "msv": "--treatment",
    "crossfit": "--treatment",
    "scale": "--scale",
    "steps": "--steps",
    "save_every": "--save-every",
    "control": "--control",
    "aux_budget": "--aux-budget",
    "corpus": "--corpus",
    "allow_eval_corpus": "--allow-eval-corpus",
    "rollout_server": "--rollout-server",
}


def _family(treatment: str) -> str:
    """The self-evolution treatments share one config file per scale; their flags come from SELF_EVOLUTION."""
    return "self-evolution" if treatment in SELF_EVOLUTION else treatment


def scales(treatment: str) -> list[str]:
    return sorted(p.name.split(".")[1] for p in CONFIGS.glob(f"{_family(treatment)}.*.json"))


def config_file(path: Path, treatment: str) -> TrainingConfig:
    """A configs/NAME.SCALE.json file as `treatment`'s config class, as written (the self-evolution flags still unset)."""
    return parse(TREATMENT_CONFIGS[treatment], read_json(path), shown(path))


def load_config(
    treatment: str,
    scale: str,
    steps: int | None = None,
    save_every: int | None = None,
    *,
    control: str | None = None,
    aux_budget: str | None = None,
    corpus: str | None = None,
    allow_eval_corpus: bool = False,
    settings: tuple[str, ...] = (),
) -> TrainingConfig:
    if treatment not in TREATMENTS:
        raise CfbenchError(f"unknown treatment {treatment!r}: choose one of {', '.join(TREATMENTS)}")
    path = CONFIGS / f"{_family(treatment)}.{scale}.json"
    if not path.is_file():
        raise CfbenchError(f"treatment {treatment!r} has no scale {scale!r}: choose one of {', '.join(scales(treatment))}")
    config = config_file(path, treatment)
    for item in settings:
        if (key := item.partition("=")[0]) in _OWN_OPTIONS:
            raise CfbenchError(f"--set {item!r}: {key} has its own option ({_OWN_OPTIONS[key]}); use that")
    if settings:
        config = with_settings(config, settings)
    changes: dict = {}
    if isinstance(config, SelfEvolutionConfig):
        msv, crossfit = SELF_EVOLUTION[treatment]
        changes = {"treatment": treatment, "msv": msv, "crossfit": crossfit, "steps": config.scheduled_steps}
        changes |= {k: v for k, v in (("control", control), ("aux_budget", aux_budget), ("corpus", corpus)) if v is not None}
        if allow_eval_corpus:
            changes["allow_eval_corpus"] = True
    elif (control, aux_budget, corpus, allow_eval_corpus) != (None, None, None, False):
        raise CfbenchError(
            "--control, --aux-budget, --corpus and --allow-eval-corpus apply to the self-evolution treatments "
            f"({', '.join(SELF_EVOLUTION)}), not {treatment!r}"
        )
    if steps is not None and isinstance(config, WarmStartConfig):
        raise CfbenchError(f"--steps does not apply to {treatment}: its length is the config's mix x epochs")
    if steps is not None:
        changes["steps"] = steps
    if save_every is not None and treatment != "base":
        changes["save_every"] = save_every
    try:
        config = dataclasses.replace(config, **changes)
    except CfbenchError as e:
        raise CfbenchError(f"{shown(path)} with the command line's settings: {e}") from None
    if isinstance(config, SelfEvolutionConfig):
        refuse_eval_corpus(config)
    return config
