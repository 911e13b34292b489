"""The treatments the study compares, each with a config file per scale (training/configs/NAME.SCALE.json;
the four self-evolution treatments share self-evolution.SCALE.json and differ by their msv/crossfit flags),
and the warm start that makes the bundled `smollm2-135m-search` (training/warmstart.py).

Every knob lives in the config file and is copied into each checkpoint, so a checkpoint says how it
was made. `--steps` may extend a run and `--save-every` trade disk for resume points; the
self-evolution treatments also take `--control`, `--aux-budget` and `--corpus`, which are recorded
like every knob. Nothing else is overridden from the command line.
"""

from __future__ import annotations

import json
from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.harness.protocol import Knobs
from cfbench.training.core.rewards import KINDS
from cfbench.training.selfevolve.crossfit import AUX_BUDGETS, CONTROLS
from cfbench.training.selfevolve.proposer import FORMATS
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
}
SELF_EVOLUTION = {
    "dr-zero": (False, False),
    "msv": (True, False),
    "crossfit": (False, True),
    "msv-crossfit": (True, True),
}  # (msv, crossfit)

_POSITIVE_INT = ("prompts_per_step", "samples_per_prompt", "micro_batch", "save_every")
_NON_NEGATIVE = ("warmup_steps", "weight_decay", "max_grad_norm")
_WARM_START_POSITIVE_INT = ("epochs", "batch_size", "grad_accumulation", "max_length", "save_every")
LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup")


def _family(treatment: str) -> str:
    """The self-evolution treatments share one config file per scale; their flags come from SELF_EVOLUTION."""
    return "self-evolution" if treatment in SELF_EVOLUTION else treatment


def scales(treatment: str) -> list[str]:
    return sorted(p.name.split(".")[1] for p in CONFIGS.glob(f"{_family(treatment)}.*.json"))


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
) -> dict:
    if treatment not in TREATMENTS:
        raise CfbenchError(f"unknown treatment {treatment!r}: choose one of {', '.join(TREATMENTS)}")
    path = CONFIGS / f"{_family(treatment)}.{scale}.json"
    if not path.is_file():
        raise CfbenchError(f"treatment {treatment!r} has no scale {scale!r}: choose one of {', '.join(scales(treatment))}")
    config = json.loads(path.read_text())
    if treatment in SELF_EVOLUTION:
        config["treatment"] = treatment
        config["msv"], config["crossfit"] = SELF_EVOLUTION[treatment]
        config["steps"] = config["rounds"] * (config["proposer_steps"] + config["solver_steps"])
        for key, value in (("control", control), ("aux_budget", aux_budget), ("corpus", corpus)):
            if value is not None:
                config[key] = value
        if allow_eval_corpus:
            config["allow_eval_corpus"] = True  # absent (not false) otherwise, so runs made before the flag still resume
    elif (control, aux_budget, corpus, allow_eval_corpus) != (None, None, None, False):
        raise CfbenchError(
            "--control, --aux-budget, --corpus and --allow-eval-corpus apply to the self-evolution treatments "
            f"({', '.join(SELF_EVOLUTION)}), not {treatment!r}"
        )
    if steps is not None and treatment == "warm-start":
        raise CfbenchError("--steps does not apply to warm-start: its length is the config's mix x epochs")
    if steps is not None:
        config["steps"] = steps
    if save_every is not None and treatment != "base":
        config["save_every"] = save_every
    validate(config, str(path))
    if treatment in SELF_EVOLUTION:
        refuse_eval_corpus(config)
    return config


def validate(config: dict, where: str) -> None:
    """One-line errors naming the knob, its value and the allowed range."""

    def bad(key: str, rule: str):
        return CfbenchError(f"{where}: knob {key} must be {rule}, got {config.get(key)!r}")

    if config["treatment"] == "warm-start":
        return _validate_warm_start(config, bad)
    if not isinstance(config.get("steps"), int) or config["steps"] < 0:
        raise bad("steps", "an integer >= 0")
    if config["treatment"] == "base":
        return
    for key in _POSITIVE_INT:
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise bad(key, "an integer >= 1")
    _check_optimiser(config, bad)
    if config["samples_per_prompt"] < 2:
        raise bad("samples_per_prompt", "at least 2 (GRPO needs a group to compare with)")
    if not isinstance(config.get("temperature"), (int, float)) or not 0 < config["temperature"] <= 2:
        raise bad("temperature", "a number in (0, 2] (rollouts are sampled)")
    if config.get("reward", {}).get("kind") not in KINDS:
        raise CfbenchError(f"{where}: reward.kind must be one of {', '.join(KINDS)}, got {config.get('reward', {}).get('kind')!r}")
    Knobs(**config["knobs"])  # raises its own one-line error for an out-of-range budget
    if config["treatment"] in SELF_EVOLUTION:
        _validate_self_evolution(config, where, bad)


def _check_optimiser(config: dict, bad) -> None:
    for key in _NON_NEGATIVE:
        if not isinstance(config.get(key), (int, float)) or config[key] < 0:
            raise bad(key, "a number >= 0")
    if not isinstance(config.get("learning_rate"), (int, float)) or not 0 < config["learning_rate"] < 1:
        raise bad("learning_rate", "a number in (0, 1)")


def _validate_warm_start(config: dict, bad) -> None:
    for key in _WARM_START_POSITIVE_INT:
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise bad(key, "an integer >= 1")
    _check_optimiser(config, bad)
    for key in ("model", "data"):
        if not isinstance(config.get(key), str) or not config[key]:
            raise bad(key, "a non-empty string")
    mix = config.get("mix")
    if not (isinstance(mix, dict) and mix and all(v == "all" or (isinstance(v, int) and v >= 0) for v in mix.values())):
        raise bad("mix", 'a non-empty map of trajectory kind -> number of examples (an integer >= 0, or "all")')
    if config.get("lr_scheduler") not in LR_SCHEDULERS:
        raise bad("lr_scheduler", f"one of {', '.join(LR_SCHEDULERS)}")
    for key in ("gradient_checkpointing", "bf16"):
        if not isinstance(config.get(key), bool):
            raise bad(key, "true or false")
    lora = config.get("lora") or {}
    if not (
        isinstance(lora.get("r"), int)
        and lora["r"] >= 1
        and isinstance(lora.get("alpha"), (int, float))
        and lora["alpha"] > 0
        and isinstance(lora.get("dropout"), (int, float))
        and 0 <= lora["dropout"] < 1
        and isinstance(lora.get("target_modules"), list)
        and lora["target_modules"]
        and all(isinstance(m, str) for m in lora["target_modules"])
    ):
        raise bad("lora", "{r: integer >= 1, alpha: number > 0, dropout: number in [0, 1), target_modules: non-empty list of module names}")


def _validate_self_evolution(config: dict, where: str, bad) -> None:
    for key in ("rounds", "proposer_steps", "solver_steps"):
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise bad(key, "an integer >= 1")
    if config["steps"] > config["rounds"] * (config["proposer_steps"] + config["solver_steps"]):
        raise bad(
            "steps",
            f"at most rounds x (proposer_steps + solver_steps) = {config['rounds'] * (config['proposer_steps'] + config['solver_steps'])}",
        )
    if not isinstance(config.get("source_pool"), int) or config["source_pool"] < 0:
        raise bad("source_pool", "an integer >= 0 (0: the whole corpus)")
    weights = config.get("hop_weights")
    if not (
        isinstance(weights, list)
        and len(weights) == 4
        and all(isinstance(w, (int, float)) and w >= 0 for w in weights)
        and sum(weights) > 0
    ):
        raise bad("hop_weights", "4 non-negative weights for hops 1..4 with a positive sum")
    if not isinstance(config.get("format_weight"), (int, float)) or not 0 <= config["format_weight"] <= 1:
        raise bad("format_weight", "a number in [0, 1]")
    for key, allowed in (("proposer_format", FORMATS), ("control", CONTROLS), ("aux_budget", AUX_BUDGETS)):
        if config.get(key) not in allowed:
            raise bad(key, f"one of {', '.join(allowed)}")
    if not config["crossfit"] and (config["control"] != "none" or config["aux_budget"] != "full"):
        raise CfbenchError(
            f"{where}: control {config['control']!r} and aux_budget {config['aux_budget']!r} need auxiliary solvers: "
            "use them with crossfit or msv-crossfit"
        )
