"""`cfbench train`: GRPO over protocol-v1 rollouts, with resumable checkpoints an eval can score as they are.

Built on accelerate: the same loop runs on one CPU (tests, cpu-smoke) and data-parallel on many
GPUs under `accelerate launch`, each role replicated or, with `sharding: "fsdp"`, sharded (core/sharding.py); accelerate
saves and restores optimizer, scheduler and RNG state, and the weights resume from the
checkpoint's HF model. Rollouts reuse the evaluation agent loop (same prompt, parsing, retrieval
and budget) through the hf engine, sampling at the config's temperature from a generator seeded by
(seed, step), so a resumed run draws the same rollouts as an uninterrupted one. This module holds
the Search-R1 loop; the self-evolution treatments run training/selfevolve.py; both share
training/learner.py.

Run directory (Search-R1):
    config.json                 the treatment config (every knob, training/config), fixed for the run
    metrics.jsonl               one row per step: reward, groups_with_signal, optimizer_step, loss (+ kl, clipped, ratio with
                                the recipe terms on), lengths,
                                searches, wall time split, cpu_s (CPU seconds of every thread of every process)
    rollouts/step-N.jsonl       every sampled trajectory with its reward
    checkpoint-N/               HF model + tokenizer + cfbench_train.json, and state/ for --resume (latest only)
    curves.png                  the metrics as plots (reward and groups with signal first), rewritten every step
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate.utils import gather_object

from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.checkpoints import TRAIN_RECORD, check_available, load_model, resolve
from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import dumps, write_atomic, write_jsonl
from cfbench.harness.runrecord import lock_directory, unlock_directory
from cfbench.training.config.classes import BaseConfig, SearchR1Config, SelfEvolutionConfig, TrainingConfig, read_run_config
from cfbench.training.config.schema import to_json
from cfbench.training.core.episodes import rollout_episode
from cfbench.training.core.learner import (
    accelerator_for_training,
    append_row,
    checkpoints,
    drop_partial_saves,
    sampler,
    save,
    start_roles,
)
from cfbench.training.core.plots import plot_curves
from cfbench.training.core.policy_update import UpdateStats, update
from cfbench.training.core.rollouts import rollouts
from cfbench.training.core.served import AdapterSync

RESUMABLE = {"steps", "save_every", "note", "rollout_server"}  # none changes a step's result; every other knob must match


def check_config(config: TrainingConfig, out: Path, resume: bool) -> None:
    """Check the run directory against the config, writing nothing: a new run needs an empty --out, a resumed one the same knobs."""
    for model in config.start_models():  # a model that cannot be loaded is refused before the run directory is made
        check_available(model)
    saved = out / "config.json"
    if not resume:
        if out.exists() and any(out.iterdir()):
            raise CfbenchError(f"{out} already holds files; pass --resume to continue that run or choose a new --out")
        return
    if not saved.is_file():
        raise CfbenchError(f"--resume: {out} holds no training run (no config.json); drop --resume to start one")
    recorded = json.loads(saved.read_text())
    treatment = recorded.get("treatment") if isinstance(recorded, dict) else None
    if treatment != config.treatment:
        raise CfbenchError(
            f"--resume: {out} holds a {treatment!r} run, not {config.treatment!r}; choose the matching --treatment or a new --out"
        )
    old, new = to_json(read_run_config(saved)), to_json(config)
    differing = sorted(k for k in set(old) | set(new) if k not in RESUMABLE and old.get(k) != new.get(k))
    if differing:
        key = differing[0]
        raise CfbenchError(
            f"--resume: knob {key} was {old.get(key)!r} in {saved}, now {new.get(key)!r}; resume with the run's own settings "
            f"(the options and --set it was started with)"
        )


def check_out(config: TrainingConfig, out: Path, resume: bool) -> int:
    """check_config, then the checkpoint a resume starts from (its step; 0 for a new run)."""
    check_config(config, out, resume)
    if not resume:
        return 0
    done = checkpoints(out)
    if done and done[-1][0] and not (done[-1][1] / "state").is_dir():
        raise CfbenchError(
            f"--resume: {done[-1][1]} has no state/; resume needs the latest checkpoint as the run wrote it "
            "(move the run's later files back or start a new --out)"
        )
    return done[-1][0] if done else 0


def train(
    config: TrainingConfig, out: Path, *, resume: bool = False, on_step: Callable[[dict], None] = lambda row: None, proposer_engine=None
) -> Path:
    """Run (or finish) a treatment into `out`; returns the last checkpoint directory.

    `proposer_engine` (step -> engine, or None) replaces a self-evolution run's proposer sampler at the steps it
    answers for: tests use it to script proposals a model as small as SmolLM2-135M never writes.
    """
    accelerator = accelerator_for_training()
    start = check_out(config, out, resume)  # every process checks before any writes
    if isinstance(config, SearchR1Config) and config.prompts_per_step % (accelerator.num_processes * config.objective.updates_per_batch):
        raise CfbenchError(
            f"knob prompts_per_step ({config.prompts_per_step}) must be a multiple of the {accelerator.num_processes} training processes "
            f"x objective.updates_per_batch ({config.objective.updates_per_batch}), so each process's mini-batches hold whole groups"
        )
    accelerator.wait_for_everyone()
    lock = None
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        lock = lock_directory(out)  # one writer at a time: a second `train --resume` here is refused before it writes
    try:
        if accelerator.is_main_process:
            write_atomic(out / "config.json", dumps(to_json(config)) + "\n")
            drop_partial_saves(out)
        if isinstance(config, BaseConfig):
            return _save_base(config, out) if accelerator.is_main_process else out / "checkpoint-0"
        if isinstance(config, SelfEvolutionConfig):
            from cfbench.training.selfevolve.run import self_evolve

            return self_evolve(config, out, start, resume, accelerator, on_step, proposer_engine)
        return _search_r1(config, out, start, accelerator, on_step)
    finally:
        if lock is not None:
            unlock_directory(out, lock)


def _search_r1(config: SearchR1Config, out: Path, start: int, accelerator, on_step: Callable[[dict], None]) -> Path:

    from cfbench.harness.retrievers.choose import retriever_for
    from cfbench.training.core.data import load_train_set

    world, rank, main = accelerator.num_processes, accelerator.process_index, accelerator.is_main_process
    if main:
        (out / "rollouts").mkdir(exist_ok=True)
    starts, tokenizer, roles, references = start_roles(config, out, start, accelerator, {"main": config.steps})
    ckpt, reference = starts["main"], references["main"]
    policy = roles["main"]
    served = AdapterSync(config.rollout_server, out) if config.rollout_server else None

    questions = load_train_set(config.train_set, sources=config.sources)
    random.Random(config.seed).shuffle(questions)
    retriever = retriever_for(config.retriever)
    tokens = PromptTokens(tokenizer)
    last = out / f"checkpoint-{start}"
    m = config.samples_per_prompt
    for step in range(start, config.steps):
        began, began_cpu = time.time(), time.process_time()
        picked = [questions[(step * config.prompts_per_step + i) % len(questions)] for i in range(config.prompts_per_step)]
        engine = sampler(accelerator, policy, tokens, ckpt, config, step + 1, f"policy-{rank}", served, name="policy")
        group = [
            dataclasses.replace(q, id=f"{q.id}#{k}") for q in picked[rank::world] for k in range(m)
        ]  # each process its share of prompts
        trajectories = rollouts(group, engine, retriever, config.knobs, config.rollout_rows)
        rewards = [config.reward.of(t.prediction, list(t.question.golden_answers), t.turns) for t in trajectories]
        cut = config.knobs.max_context_tokens
        episodes = [rollout_episode(tokens, t, r, i // m, cut) for i, (t, r) in enumerate(zip(trajectories, rewards))]
        rolled = time.time()
        stats = update(policy, accelerator, episodes, config, tokenizer.pad_token_id or 0, reference)
        updated = time.time()
        row = _metrics(
            step + 1, episodes, trajectories, rewards, stats, rolled - began, updated - rolled, policy.scheduler.get_last_lr()[0]
        )
        row["cpu_s"] = round(time.process_time() - began_cpu, 3)  # this process's threads; a paused process adds none
        row = _mean_over_processes(accelerator, row)
        row["cpu_s"] = round(row["cpu_s"] * world, 3)  # every process's
        rows = gather_object(_rollout_rows(trajectories, rewards))
        if main:
            write_jsonl(out / "rollouts" / f"step-{step + 1}.jsonl", rows)
            append_row(out / "metrics.jsonl", row)
            plot_curves(out / "metrics.jsonl", out / "curves.png")  # every step: a run without signal shows it at once
        if (step + 1) % config.save_every == 0 or step + 1 == config.steps:
            last = save(accelerator, roles, tokenizer, out, step + 1, {"config": to_json(config)})
        if main:
            on_step(row)
    return last


def _metrics(step, episodes, trajectories, rewards, stats: UpdateStats, rollout_s, update_s, lr) -> dict:
    n = len(trajectories)
    return {
        "step": step,
        "reward": sum(rewards) / n,
        **stats.metrics(),
        "learning_rate": lr,
        "response_tokens": sum(sum(e.trained) for e in episodes) / n,
        "cut_rollouts": sum(e.cut for e in episodes) / n,
        "searches_per_rollout": sum(t["action"] == "search" for tr in trajectories for t in tr.turns) / n,
        "answered": sum(bool(t.prediction) for t in trajectories) / n,
        "well_formed": sum(all(x["action"] != "invalid" for x in t.turns) for t in trajectories) / n,
        "rollout_s": round(rollout_s, 3),
        "update_s": round(update_s, 3),
    }


def _rollout_rows(trajectories, rewards) -> list[dict]:
    return [
        {
            "id": t.question.id,
            "question": t.question.question,
            "golden_answers": list(t.question.golden_answers),
            "turns": t.turns,
            "prediction": t.prediction,
            "reward": r,
        }
        for t, r in zip(trajectories, rewards)
    ]


def _mean_over_processes(accelerator, row: dict) -> dict:
    """Each process saw an equal share of the step's prompts, so the step's value is the mean of theirs."""
    if accelerator.num_processes == 1:
        return row
    keys = [k for k in sorted(row) if k not in ("step", "optimizer_step")]
    means = accelerator.reduce(torch.tensor([float(row[k]) for k in keys], dtype=torch.float64, device=accelerator.device), "mean").tolist()
    return {"step": row["step"], **dict(zip(keys, means)), "optimizer_step": row["optimizer_step"]}  # decided for all processes at once


def _save_base(config: BaseConfig, out: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = resolve(config.model)
    final, tmp = out / "checkpoint-0", out / ".checkpoint-0.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    load_model(AutoModelForCausalLM, ckpt.location, torch.float32).save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(ckpt.location).save_pretrained(tmp)
    write_atomic(tmp / TRAIN_RECORD, dumps({"step": 0, "config": to_json(config), "weights_from": ckpt.describe()}) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final
