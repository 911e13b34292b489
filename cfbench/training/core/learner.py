"""What every trained role shares: its model + optimizer + scheduler, sampled rollouts, the update, checkpoints.

A role (the Search-R1 policy; Dr. Zero's proposer, main solver and auxiliary solvers) is a copy of
the starting model prepared by accelerate with its own AdamW and constant-with-warmup schedule
(training/core/policy_update.py updates it).
`save` writes checkpoint-N atomically: the main policy as a plain HF model at the top (what `cfbench
eval --ckpt` scores), other roles as HF models in sub-directories, and accelerate's state of every
role (optimizer, scheduler, RNG) in state/ for --resume. The weights are stored once, as the HF
models: `resume_from` rebuilds each role from them and `restore` adds the rest. Only the latest
checkpoint keeps state/ (resume always starts there); once a newer one is in place, an older
one's state/ is removed and its HF models and record stay for eval.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from accelerate.utils import broadcast_object_list

from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.checkpoints import ResolvedCheckpoint
from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import append_jsonl, dumps, write_atomic

if TYPE_CHECKING:
    from cfbench.training.config.classes import RLConfig

TRAIN_RECORD = "cfbench_train.json"


@dataclass
class Learner:
    model: object
    optimizer: object
    scheduler: object


def learner(config: RLConfig, weights: str | Path, accelerator, updates: int) -> Learner:
    """A role whose model starts from the HF model at `weights` (a directory or hub id) and takes `updates`
    schedule steps in the whole run (its warmup may be a share of them: RLConfig.warmup)."""
    from transformers import AutoModelForCausalLM, get_constant_schedule_with_warmup

    model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
    if config.gradient_checkpointing:  # only in train mode: the role's sampler (eval mode) decodes with its K/V cache as usual
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = get_constant_schedule_with_warmup(optimizer, config.warmup(updates))
    return Learner(*accelerator.prepare(model, optimizer, scheduler))


def sampler(accelerator, role: Learner, tokens, ckpt, config: RLConfig, step: int, stream: str) -> HFBackend:
    """An hf engine sampling from the role's current weights; its seed depends only on (seed, step, stream)."""
    seed = int.from_bytes(hashlib.sha256(f"{config.seed}:{step}:{stream}".encode()).digest()[:8], "big")
    role.model.eval()
    return HFBackend(accelerator.unwrap_model(role.model), tokens, ckpt=ckpt, dtype="float32", temperature=config.temperature, seed=seed)


def checkpoints(out: Path) -> list[tuple[int, Path]]:
    """The run's checkpoint-N directories by step (a copy named checkpoint-3-old is not one)."""
    return sorted((int(m.group(1)), p) for p in out.glob("checkpoint-*") if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)))


def drop_partial_saves(out: Path) -> None:
    """Remove what a save killed mid-write left (.checkpoint-N.tmp): never a checkpoint, and it holds disk."""
    for partial in out.glob(".checkpoint-*.tmp"):
        shutil.rmtree(partial)


def resume_from(out: Path, start: int, ckpt: ResolvedCheckpoint, name: str) -> str | Path:
    """Where role `name` ("" = the main policy) takes its weights: the starting model, or checkpoint-`start`'s copy."""
    return out / f"checkpoint-{start}" / name if start else ckpt.location


def restore(accelerator, checkpoint: Path) -> None:
    """Optimizer, scheduler and RNG state of every role from checkpoint/state; the weights came with `resume_from`.

    States written before the weights were stored once still hold model files; they are not read.
    """
    handle = accelerator.register_load_state_pre_hook(lambda models, input_dir: models.clear())
    try:
        accelerator.load_state(str(checkpoint / "state"))
    finally:
        handle.remove()


def check_space(accelerator, roles: dict[str, Learner], out: Path) -> None:
    """Refuse, before writing, a checkpoint the disk cannot hold: every role's weights and AdamW's two moments.

    Called when a run starts (fail before the work, not after it) and before every save. The main
    process reads the free space and every process decides on that number, so all stop together.
    """
    need = sum(3 * p.numel() * p.element_size() for role in roles.values() for p in role.model.parameters()) + (16 << 20) * len(roles)
    [free] = broadcast_object_list([shutil.disk_usage(out).free if accelerator.is_main_process else None])
    if free < need:
        raise CfbenchError(
            f"a checkpoint of this run needs about {need / 1e9:.2f} GB at {out} and {free / 1e9:.2f} GB are free; "
            "free some space, then run again (--resume continues from the last checkpoint, which is intact)"
        )


def save(accelerator, roles: dict[str, Learner], tokenizer, out: Path, step: int, record: dict) -> Path:
    """checkpoint-N written beside, then moved into place: a crash never leaves a half checkpoint.

    roles[""] is the main policy (top level); other names become sub-directories. The main process
    writes the HF models; every process adds its part of the accelerate state. A failed write
    (a full disk, say) removes what it had written.
    """
    check_space(accelerator, roles, out)
    final = out / f"checkpoint-{step}"
    tmp = out / f".checkpoint-{step}.tmp"
    try:
        if accelerator.is_main_process:
            for name, role in roles.items():
                accelerator.unwrap_model(role.model).save_pretrained(tmp / name, safe_serialization=True)
                tokenizer.save_pretrained(tmp / name)
        accelerator.wait_for_everyone()
        handle = accelerator.register_save_state_pre_hook(lambda models, weights, output_dir: weights.clear())  # stored once, above
        try:
            accelerator.save_state(str(tmp / "state"))
        finally:
            handle.remove()
        accelerator.wait_for_everyone()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if accelerator.is_main_process:
        write_atomic(tmp / TRAIN_RECORD, dumps({"step": step, **record}) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for older, path in checkpoints(out):
            if older < step:
                shutil.rmtree(path / "state", ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def keep_rows_before(path: Path, start: int) -> None:
    """Drop rows of steps after the checkpoint we resume from (a crash can leave some)."""
    if path.is_file():
        rows = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= start]
        write_atomic(path, "".join(r + "\n" for r in rows))


def append_row(path: Path, row: dict) -> None:
    append_jsonl(path, [row])
