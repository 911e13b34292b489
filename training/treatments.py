"""The treatments the study compares, each with a config file per scale (training/configs/NAME.SCALE.json).

Every knob lives in the config file and is copied into each checkpoint, so a checkpoint says how it
was made. `--steps` may extend a run; nothing else is overridden from the command line.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import CfbenchError
from harness.protocol import Knobs
from training.rewards import KINDS

CONFIGS = Path(__file__).parent / "configs"
TREATMENTS = {
    "base": "the untrained model, saved as checkpoint-0",
    "search-r1": "GRPO on NQ + HotpotQA training questions, exact-match outcome reward",
}
PLANNED = ("dr-zero", "msv", "crossfit", "msv-crossfit")  # the self-evolution treatments (issue 7)

_POSITIVE_INT = ("prompts_per_step", "samples_per_prompt", "micro_batch", "save_every")
_NON_NEGATIVE = ("warmup_steps", "weight_decay", "max_grad_norm")


def scales(treatment: str) -> list[str]:
    return sorted(p.name.split(".")[1] for p in CONFIGS.glob(f"{treatment}.*.json"))


def load_config(treatment: str, scale: str, steps: int | None = None) -> dict:
    if treatment not in TREATMENTS:
        later = f"; {', '.join(PLANNED)} are not built yet" if treatment in PLANNED else ""
        raise CfbenchError(f"unknown treatment {treatment!r}: choose one of {', '.join(TREATMENTS)}{later}")
    path = CONFIGS / f"{treatment}.{scale}.json"
    if not path.is_file():
        raise CfbenchError(f"treatment {treatment!r} has no scale {scale!r}: choose one of {', '.join(scales(treatment))}")
    config = json.loads(path.read_text())
    if steps is not None:
        config["steps"] = steps
    validate(config, str(path))
    return config


def validate(config: dict, where: str) -> None:
    """One-line errors naming the knob, its value and the allowed range."""
    def bad(key: str, rule: str):
        return CfbenchError(f"{where}: knob {key} must be {rule}, got {config.get(key)!r}")

    if not isinstance(config.get("steps"), int) or config["steps"] < 0:
        raise bad("steps", "an integer >= 0")
    if config["treatment"] == "base":
        return
    for key in _POSITIVE_INT:
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise bad(key, "an integer >= 1")
    for key in _NON_NEGATIVE:
        if not isinstance(config.get(key), (int, float)) or config[key] < 0:
            raise bad(key, "a number >= 0")
    if config["samples_per_prompt"] < 2:
        raise bad("samples_per_prompt", "at least 2 (GRPO needs a group to compare with)")
    if not isinstance(config.get("learning_rate"), (int, float)) or not 0 < config["learning_rate"] < 1:
        raise bad("learning_rate", "a number in (0, 1)")
    if not isinstance(config.get("temperature"), (int, float)) or not 0 < config["temperature"] <= 2:
        raise bad("temperature", "a number in (0, 2] (rollouts are sampled)")
    if config.get("reward", {}).get("kind") not in KINDS:
        raise CfbenchError(f"{where}: reward.kind must be one of {', '.join(KINDS)}, got {config.get('reward', {}).get('kind')!r}")
    Knobs(**config["knobs"])  # raises its own one-line error for an out-of-range budget
