"""`cfbench train`: GRPO over protocol-v1 rollouts, with resumable checkpoints an eval can score as they are.

Built on accelerate: the same loop runs on one CPU (tests, cpu-smoke) and on many GPUs under
`accelerate launch` with DeepSpeed or FSDP; accelerate saves and restores model, optimizer,
scheduler and RNG state. Rollouts reuse the evaluation agent loop (same prompt, parsing, retrieval
and budget) through the hf engine, sampling at the config's temperature from a generator seeded by
(seed, step), so a resumed run draws the same rollouts as an uninterrupted one.

Run directory:
    config.json                 the treatment config (every knob), fixed for the run
    metrics.jsonl               one row per step: reward, loss, lengths, searches, wall time split
    rollouts/step-N.jsonl       every sampled trajectory with its reward
    checkpoint-N/               HF model + tokenizer + cfbench_train.json, and state/ for --resume
    curves.png                  the metrics as plots
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch

from accelerate.utils import gather_object

from harness.agent import run_batch
from harness.backends.hf import HFBackend
from harness.backends.tokens import PromptTokens
from harness.checkpoints import resolve
from harness.errors import CfbenchError
from harness.protocol import Knobs, user_prompt
from harness.runrecord import dumps, write_atomic
from harness.suite import Question
from training.episodes import collate, encode_episode
from training.objective import group_advantages, policy_loss, token_logprobs
from training.plots import plot_curves
from training.rewards import reward

TRAIN_RECORD = "cfbench_train.json"
RESUMABLE = {"steps"}  # a resumed run may be extended; every other knob must match


def checkpoints(out: Path) -> list[tuple[int, Path]]:
    found = [(int(p.name.split("-")[1]), p) for p in out.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
    return sorted(found)


def check_out(config: dict, out: Path, resume: bool) -> int:
    """Check the run directory against the config, writing nothing; returns the step to start from."""
    saved = out / "config.json"
    if not resume:
        if out.exists() and any(out.iterdir()):
            raise CfbenchError(f"{out} already holds files; pass --resume to continue that run or choose a new --out")
        return 0
    if not saved.is_file():
        raise CfbenchError(f"--resume: {out} holds no training run (no config.json); drop --resume to start one")
    old = json.loads(saved.read_text())
    if old.get("treatment") != config["treatment"]:
        raise CfbenchError(f"--resume: {out} holds a {old.get('treatment')!r} run, not {config['treatment']!r}; choose the matching --treatment or a new --out")
    differing = sorted(k for k in set(old) | set(config) if k not in RESUMABLE and old.get(k) != config.get(k))
    if differing:
        key = differing[0]
        raise CfbenchError(f"--resume: knob {key} was {old.get(key)!r} in {saved}, now {config.get(key)!r}; resume with the run's own settings")
    done = checkpoints(out)
    return done[-1][0] if done else 0


def train(config: dict, out: Path, *, resume: bool = False, on_step: Callable[[dict], None] = lambda row: None) -> Path:
    """Run (or finish) a treatment into `out`; returns the last checkpoint directory."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    world, rank, main = accelerator.num_processes, accelerator.process_index, accelerator.is_main_process
    start = check_out(config, out, resume)  # every process checks before any writes
    if config["treatment"] != "base" and config["prompts_per_step"] % world:
        raise CfbenchError(f"knob prompts_per_step ({config['prompts_per_step']}) must be a multiple of the {world} training processes")
    accelerator.wait_for_everyone()
    if main:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "config.json", dumps(config) + "\n")
    if config["treatment"] == "base":
        return _save_base(config, out) if main else out / "checkpoint-0"
    if main:
        (out / "rollouts").mkdir(exist_ok=True)
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_constant_schedule_with_warmup

    from harness.retrievers.choose import retriever_for
    from training.data import load_train_set

    torch.manual_seed(config["seed"])
    ckpt = resolve(config["model"])
    tokenizer = AutoTokenizer.from_pretrained(ckpt.location)
    model = AutoModelForCausalLM.from_pretrained(ckpt.location, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["learning_rate"], weight_decay=config["weight_decay"])
    scheduler = get_constant_schedule_with_warmup(optimizer, config["warmup_steps"])
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    if start:
        accelerator.load_state(str(out / f"checkpoint-{start}" / "state"))
    if main:
        _keep_metrics_before(out, start)

    questions = load_train_set(config["train_set"], sources=tuple(config["sources"]))
    random.Random(config["seed"]).shuffle(questions)
    retriever = retriever_for(config["retriever"])
    knobs = Knobs(**config["knobs"])
    tokens = PromptTokens(tokenizer)
    last = out / f"checkpoint-{start}"
    for step in range(start, config["steps"]):
        began = time.time()
        picked = [questions[(step * config["prompts_per_step"] + i) % len(questions)] for i in range(config["prompts_per_step"])]
        sampler = HFBackend(accelerator.unwrap_model(model), tokens, ckpt=ckpt, dtype="float32",
                            temperature=config["temperature"], seed=(config["seed"] * 1_000_003 + step) * 1024 + rank)
        model.eval()
        group = [Question(f"{q.id}#{k}", q.source, q.question, tuple(q.golden_answers))
                 for q in picked[rank::world] for k in range(config["samples_per_prompt"])]  # each process its share of prompts
        trajectories = run_batch(group, sampler, retriever, knobs)
        rewards = [reward(config["reward"]["kind"], t.prediction, list(t.question.golden_answers), t.turns,
                          **{k: v for k, v in config["reward"].items() if k != "kind"}) for t in trajectories]
        episodes = [encode_episode(tokens, tokens.chat_prompt(user_prompt(t.question.question)), t.turns, r, i // config["samples_per_prompt"])
                    for i, (t, r) in enumerate(zip(trajectories, rewards))]
        rolled = time.time()
        loss, grad_norm = _update(model, optimizer, scheduler, accelerator, episodes, config, tokenizer.pad_token_id or 0)
        updated = time.time()
        row = _metrics(step + 1, episodes, trajectories, rewards, loss, grad_norm, rolled - began, updated - rolled,
                       scheduler.get_last_lr()[0])
        row = _mean_over_processes(accelerator, row)
        rows = gather_object(_rollout_rows(trajectories, rewards))
        if main:
            write_atomic(out / "rollouts" / f"step-{step + 1}.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
            with (out / "metrics.jsonl").open("a") as fh:
                fh.write(json.dumps(row, sort_keys=True) + "\n")
        if (step + 1) % config["save_every"] == 0 or step + 1 == config["steps"]:
            last = _save(accelerator, model, tokenizer, config, out, step + 1)
            if main:
                plot_curves(out / "metrics.jsonl", out / "curves.png")
        if main:
            on_step(row)
    return last


def _update(model, optimizer, scheduler, accelerator, episodes, config: dict, pad_id: int) -> tuple[float, float]:
    """One policy-gradient step over all episodes, in micro-batches whose losses sum to the full objective."""
    model.train()
    advantages = group_advantages(torch.tensor([e.reward for e in episodes]), [e.group for e in episodes])
    total = 0.0
    for first in range(0, len(episodes), config["micro_batch"]):
        chunk = episodes[first : first + config["micro_batch"]]
        ids, attention, trained = collate(chunk, pad_id)
        logprobs = token_logprobs(model, ids.to(accelerator.device), attention.to(accelerator.device))
        loss = policy_loss(logprobs, trained.to(accelerator.device), advantages[first : first + len(chunk)].to(accelerator.device),
                           episodes=len(episodes))
        accelerator.backward(loss)
        total += loss.item()
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), config["max_grad_norm"])
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return total, float(grad_norm)


def _metrics(step, episodes, trajectories, rewards, loss, grad_norm, rollout_s, update_s, lr) -> dict:
    n = len(trajectories)
    return {
        "step": step,
        "reward": sum(rewards) / n,
        "loss": loss,
        "grad_norm": grad_norm,
        "learning_rate": lr,
        "response_tokens": sum(sum(e.trained) for e in episodes) / n,
        "searches_per_rollout": sum(t["action"] == "search" for tr in trajectories for t in tr.turns) / n,
        "answered": sum(bool(t.prediction) for t in trajectories) / n,
        "well_formed": sum(all(x["action"] != "invalid" for x in t.turns) for t in trajectories) / n,
        "rollout_s": round(rollout_s, 3),
        "update_s": round(update_s, 3),
    }


def _rollout_rows(trajectories, rewards) -> list[dict]:
    return [{"id": t.question.id, "question": t.question.question, "golden_answers": list(t.question.golden_answers),
             "turns": t.turns, "prediction": t.prediction, "reward": r} for t, r in zip(trajectories, rewards)]


def _mean_over_processes(accelerator, row: dict) -> dict:
    """Each process saw an equal share of the step's prompts, so the step's value is the mean of theirs."""
    if accelerator.num_processes == 1:
        return row
    keys = [k for k in sorted(row) if k != "step"]
    means = accelerator.reduce(torch.tensor([float(row[k]) for k in keys], dtype=torch.float64, device=accelerator.device), "mean").tolist()
    return {"step": row["step"], **dict(zip(keys, means))}


def _keep_metrics_before(out: Path, start: int) -> None:
    """Drop metric rows of steps after the checkpoint we resume from (a crash can leave some)."""
    path = out / "metrics.jsonl"
    if path.is_file():
        rows = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= start]
        write_atomic(path, "".join(r + "\n" for r in rows))


def _save(accelerator, model, tokenizer, config: dict, out: Path, step: int) -> Path:
    """checkpoint-N written beside, then moved into place: a crash never leaves a half checkpoint.

    The main process writes the HF model; every process adds its part of the accelerate state.
    """
    final = out / f"checkpoint-{step}"
    tmp = out / f".checkpoint-{step}.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        accelerator.unwrap_model(model).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp / "state"))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        write_atomic(tmp / TRAIN_RECORD, dumps({"step": step, "config": config}) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    accelerator.wait_for_everyone()
    return final


def _save_base(config: dict, out: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = resolve(config["model"])
    final, tmp = out / "checkpoint-0", out / ".checkpoint-0.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    AutoModelForCausalLM.from_pretrained(ckpt.location, dtype=torch.float32).save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(ckpt.location).save_pretrained(tmp)
    write_atomic(tmp / TRAIN_RECORD, dumps({"step": 0, "config": config, "weights_from": ckpt.describe()}) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final
