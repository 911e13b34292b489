"""`cfbench train --engine verl` for the self-evolution treatments: cfbench's loop drives, verl's roles do the GPU work.

The loop is selfevolve/loop.py's `Loop`, as selfevolve/run.py drives it: proposals, admission (MSV's gate),
scoring (CrossFit's routing), which role trains on what, the audit and metrics rows. Below its sampling and its per-role update,
each role is a set of verl pieces (roles.py):
    start          roles.start: one resource pool for the node's GPUs; per role its worker group, vLLM replicas
                   (role-named), agent-loop workers running protocol v1 and checkpoint-engine manager
    a role samples sampling.RoleSampling: wake its replicas and push its weights, generate, sleep them again
    a role updates role_update.update: its episodes as a DataProto, log-probs, cfbench_grpo advantages, one step
    save / resume  every role's worker group saves (loads) its verl checkpoint under checkpoint-N/<role>, beside
                   cfbench_train.json (step, config, provenance), written as .checkpoint-N.tmp and then moved into
                   place, so a checkpoint-N directory is always whole
The run directory is selfevolve/run.py's, written by the same functions of selfevolve/loop.py (config.json,
folds.json, audit/step-N.jsonl, metrics.jsonl, curves.png), except that checkpoint-N/ holds each role's verl
checkpoint (FSDP shards of weights and optimizer; verl's model_merger turns one into an HF model) instead of HF
models, and verl/<role>/agent_loops.yaml registers the agent loop for each role's workers.
Runs in one process (the Ray driver); imports verl.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.checkpoints import TRAIN_RECORD, resolve
from cfbench.harness.corpus import load_corpus
from cfbench.harness.jsonl import dumps, write_atomic
from cfbench.harness.runrecord import lock_directory, unlock_directory
from cfbench.training.config.classes import SelfEvolutionConfig
from cfbench.training.config.schema import to_json
from cfbench.training.core.learner import checkpoints, drop_partial_saves, keep_rows_before
from cfbench.training.selfevolve import crossfit
from cfbench.training.selfevolve.loop import Loop, checkpoint_record, drop_audits_after, record_step, restored_provenance
from cfbench.training.selfevolve.sources import corpus_path, pool_folds, source_pool, tasks_for_step
from cfbench.training.trainer import check_config
from cfbench.training.verl_engine.agent_loop import write_registry
from cfbench.training.verl_engine.role_update import update
from cfbench.training.verl_engine.roles import VerlRole, start
from cfbench.training.verl_engine.sampling import RoleEngine, RoleSampling


def run(
    config: SelfEvolutionConfig, out: Path, configs: dict[str, DictConfig], gpus: int, resume: bool, on_step: Callable[[dict], None]
) -> Path:
    """Train `config` into `out` on this node's `gpus` GPUs, each role with its composed verl configuration (`configs`);
    with `resume`, from the run's last whole checkpoint. Returns the last checkpoint directory."""
    import ray
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    check_config(config, out, resume)
    out.mkdir(parents=True, exist_ok=True)
    lock = lock_directory(out)
    try:
        write_atomic(out / "config.json", dumps(to_json(config)) + "\n")
        drop_partial_saves(out)
        for cfg in configs.values():
            write_registry(Path(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path), out / "config.json")
            OmegaConf.resolve(cfg)
        if not ray.is_initialized():  # as verl's run_ppo starts Ray: its runtime environment, then the config's
            first = next(iter(configs.values()))
            ray_init = first.ray_kwargs.get("ray_init", {})
            runtime_env = OmegaConf.merge(get_ppo_ray_runtime_env(first), ray_init.get("runtime_env", {}))
            ray.init(**OmegaConf.to_container(OmegaConf.create({**ray_init, "runtime_env": runtime_env})))
        done = [step for step, path in checkpoints(out) if (path / TRAIN_RECORD).is_file()] if resume else []
        return evolve(config, out, start(configs, gpus), done[-1] if done else 0, resume, gpus, on_step)
    finally:
        unlock_directory(out, lock)


def evolve(
    config: SelfEvolutionConfig,
    out: Path,
    roles: dict[str, VerlRole],
    first: int,
    resume: bool,
    gpus: int,
    on_step: Callable[[dict], None],
) -> Path:
    """Steps first+1 .. config.steps of the run in `out`, every role restored from checkpoint-`first` when first > 0."""
    from transformers import AutoTokenizer

    corpus = load_corpus(corpus_path(config))
    pool = source_pool(corpus, config.source_pool, config.seed)
    folds = pool_folds(corpus, pool, out, resume, (config.proposer_steps + config.solver_steps) * config.prompts_per_step)
    (out / "audit").mkdir(exist_ok=True)
    names = [*crossfit.solvers(config.crossfit, config.control), "proposer"]
    provenance = restored_provenance(out, first, names)
    for name, role in roles.items() if first else ():
        role.workers.load_checkpoint(local_path=str(out / f"checkpoint-{first}" / name), del_local_after_load=False)
    drop_audits_after(out, first)
    keep_rows_before(out / "metrics.jsonl", first)
    tokenizer = AutoTokenizer.from_pretrained(resolve(config.start_model("main")).location)
    tokens, pad = PromptTokens(tokenizer), tokenizer.pad_token_id or 0
    sampling = RoleSampling(roles, config.knobs)
    # the agent-loop workers retrieve (agent_loop.py) and sampling.py pushes a role's weights itself: no retriever, no `ready`
    loop = Loop(config, tokens, None, provenance, dict(zip(corpus.ids, corpus.contents)), sampling, lambda name: None)
    engines = {name: RoleEngine(name) for name in roles}
    last = out / f"checkpoint-{first}"
    for step in range(first + 1, config.steps + 1):
        began = time.time()
        sampling.step = step
        tasks = tasks_for_step(corpus, pool, step, config.prompts_per_step, config.seed, config.hop_weights)
        state = loop.rollouts(step, tasks, folds, engines)
        rolled = time.time()
        loop.updates(state, engines, lambda name, episodes: update(roles[name], episodes, config.for_role(name), pad, gpus))
        row = state.metrics(rolled - began, time.time() - rolled, f"verl on {gpus} GPUs") | {"processes": gpus}
        record_step(out, state, row)
        if step % config.save_every == 0 or step == config.steps:
            last = save(roles, out, step, checkpoint_record(config, provenance, corpus.sha256))
        on_step(row)
    return last


def save(roles: dict[str, VerlRole], out: Path, step: int, record: dict) -> Path:
    """checkpoint-`step`: every role's verl checkpoint in its sub-directory and the run's record, moved into place whole."""
    final, tmp = out / f"checkpoint-{step}", out / f".checkpoint-{step}.tmp"
    try:
        tmp.mkdir(parents=True)
        for name, role in roles.items():
            role.workers.save_checkpoint(str(tmp / name), None, step, max_ckpt_to_keep=None)
        write_atomic(tmp / TRAIN_RECORD, dumps({"step": step, **record}) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final
