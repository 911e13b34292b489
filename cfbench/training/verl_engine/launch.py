"""`cfbench train --engine verl`: print the verl configuration a treatment launches (--dry-run), or launch it.

The configuration is verl's own `ppo_trainer` composed by Hydra with recipe.py's settings as
overrides, exactly what `python -m verl.trainer.main_ppo OVERRIDES` would run; Hydra refuses a key
verl does not declare, and verl's `validate_config` checks the batch sizes against the GPUs. Without
verl installed, --dry-run prints cfbench's settings alone and says so (verl's defaults fill the rest).

Search-R1 launches verl's own trainer (`run_ppo`). The self-evolution treatments (dr-zero, msv, crossfit,
msv-crossfit) launch driver.py: cfbench's loop driving one verl worker group, vLLM replicas and agent-loop
workers per role, all roles on this node's GPUs; --dry-run prints each role's configuration.
Neither launch has run on a GPU (docs/training-at-scale.md, "The verl path").
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import random
import warnings
from pathlib import Path

import yaml

from cfbench.harness.errors import CfbenchError
from cfbench.training.config.classes import RLConfig, SearchR1Config, SelfEvolutionConfig, TrainingConfig
from cfbench.training.config.schema import to_json
from cfbench.training.verl_engine.recipe import AGENT_LOOP, SETUP_HOOK, dotlist, verl_configs

VERL_MISSING = (
    "verl is not installed here: cfbench's settings only, verl's defaults fill every other key "
    "(its own venv: docs/training-at-scale.md, Environment)"
)


def verl_installed() -> bool:
    return importlib.util.find_spec("verl") is not None


def rl_config(config: TrainingConfig) -> RLConfig:
    if not isinstance(config, RLConfig):
        raise CfbenchError(
            f"--engine verl runs the GRPO treatments (search-r1, dr-zero, msv, crossfit, msv-crossfit), not {config.treatment!r}"
        )
    return config


def overrides(role_config: dict) -> list[str]:
    return [*dotlist(role_config), SETUP_HOOK]


def compose(role_config: dict):
    """verl's ppo_trainer config with `role_config` applied (verl and Hydra imported here), validated as main_ppo does."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with initialize_config_module("verl.trainer.config", version_base=None):
        cfg = hydra_compose("ppo_trainer", overrides=overrides(role_config))
    try:  # quietly: it prints its success to stdout and warns that GRPO has no critic, which is the recipe
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Disabled critic")
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except (AssertionError, ValueError) as e:
        raise CfbenchError(f"verl refuses the generated configuration: {str(e).splitlines()[0]}") from None
    return cfg


def dry_run(config: TrainingConfig, out: Path, gpus: int) -> str:
    """Every role's verl configuration, composed with verl's defaults when verl is installed, and the command that runs it."""
    config = rl_config(config)
    lines = []
    full = verl_installed()
    if not full:
        lines.append(f"# {VERL_MISSING}")
    for role, tree in verl_configs(config, out, gpus).items():
        lines.append(f"# ---- {config.treatment} {config.scale}: role {role} on {gpus} GPUs ----")
        if full:
            from omegaconf import OmegaConf

            lines.append(OmegaConf.to_yaml(compose(tree)).rstrip())
        else:
            lines.append(yaml.safe_dump(tree, sort_keys=False).rstrip())
        lines.append("# as a command line: python -m verl.trainer.main_ppo \\")
        lines += [f"#   {o} \\" for o in overrides(tree)[:-1]] + [f"#   {overrides(tree)[-1]}"]
    return "\n".join(lines) + "\n"


def write_inputs(config: SearchR1Config, run: Path) -> None:
    """The policy's training rows in cfbench's order (its seeded shuffle, cycled as trainer.py draws a step's prompts)
    and the agent-loop registry verl reads; verl's dataloader reads them in order (data.shuffle false)."""
    import pandas as pd

    from cfbench.harness import protocol
    from cfbench.training.core.data import load_train_set
    from cfbench.training.verl_engine.agent_loop import write_registry

    questions = load_train_set(config.train_set, sources=config.sources)
    random.Random(config.seed).shuffle(questions)
    rows = []
    for i in range(config.steps * config.prompts_per_step):
        q = questions[i % len(questions)]
        user = protocol.user_prompt(q.question)
        rows.append(
            {
                "data_source": config.train_set,
                "agent_name": AGENT_LOOP,
                "prompt": [{"role": "user", "content": user}],
                "extra_info": {"index": i, "id": q.id, "question": q.question, "golden_answers": list(q.golden_answers), "user": user},
            }
        )
    run.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(run / "train.parquet")
    (run / "config.json").write_text(json.dumps(to_json(config), indent=1) + "\n")  # what the agent loop reads
    write_registry(run / "agent_loops.yaml", run / "config.json")


def launch(config: TrainingConfig, out: Path, gpus: int, resume: bool = False) -> None:
    """Run a GRPO config on verl on this node's `gpus` GPUs: Search-R1 through verl's trainer, a self-evolution
    treatment through driver.py (`resume`: from its last checkpoint)."""
    config = rl_config(config)
    if not verl_installed():
        raise CfbenchError("--engine verl needs verl, installed in its own venv as docs/training-at-scale.md (Environment) shows")
    if isinstance(config, SelfEvolutionConfig):
        return _self_evolve(config, out, gpus, resume)
    if out.exists() and any(out.iterdir()):
        raise CfbenchError(f"{out} already holds files; choose a new --out (verl resumes from its own checkpoints under {out}/verl)")
    (tree,) = verl_configs(config, out, gpus).values()
    cfg = compose(tree)  # refused before anything is written
    write_inputs(config, Path(tree["data"]["train_files"]).parent)

    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    import cfbench.training.verl_engine.advantage  # noqa: F401  registers cfbench_grpo in this process too

    run_ppo(cfg, task_runner_class=TaskRunnerV1)


def _self_evolve(config: SelfEvolutionConfig, out: Path, gpus: int, resume: bool) -> None:
    if config.objective.updates_per_batch != 1:
        raise CfbenchError(
            f"objective.updates_per_batch is {config.objective.updates_per_batch}; --engine verl updates a self-evolution role "
            "once per step (its batch size varies with what was admitted): set it to 1"
        )
    configs = {role: compose(tree) for role, tree in verl_configs(config, out, gpus).items()}  # refused before anything is written
    from cfbench.training.verl_engine.driver import run

    run(config, out, configs, gpus, resume, lambda row: print(json.dumps(row), flush=True))
