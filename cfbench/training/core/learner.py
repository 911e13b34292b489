"""What every trained role shares: its model + optimizer + scheduler, sampled rollouts, the update, checkpoints.

A role (the Search-R1 policy; Dr. Zero's proposer, main solver and auxiliary solvers) is a copy of
the starting model prepared by accelerate with its own AdamW and constant-with-warmup schedule
(training/core/policy_update.py updates it); with a `lora` section in the config it trains a peft
LoRA adapter over the frozen starting model instead of every weight (the cpu scale: its checkpoints
are a few MB, small enough to commit beside an unfinished evaluation).
`save` writes checkpoint-N atomically: the main policy at the top (an HF model, or its adapter: either
is what `cfbench eval --ckpt` scores), other roles likewise in sub-directories, and accelerate's state
of every role (optimizer, scheduler, RNG) in state/ for --resume. The weights are stored once, as
those models: `resume_from` rebuilds each role from them and `restore` adds the rest. Only the latest
checkpoint keeps state/ (resume always starts there); once a newer one is in place, an older
one's state/ is removed and its HF models and record stay for eval.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from accelerate.utils import broadcast_object_list

from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.checkpoints import TRAIN_RECORD, ResolvedCheckpoint, load_model, resolve
from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import append_jsonl, dumps, write_atomic
from cfbench.training.core.policy_update import reference_model
from cfbench.training.core.served import AdapterSync
from cfbench.training.core.sharding import full_state, load_optimizer, optimizer_file, refresh, save_optimizer, sharded

if TYPE_CHECKING:
    from cfbench.training.config.classes import RLConfig


def accelerator_for_training():
    """The run's accelerate state: on the GPUs when there are any, else on the CPU (tests, cpu scales).

    Each role's scheduler steps once per optimizer update, whatever the process count: accelerate's
    default steps a prepared scheduler once per process at every update (for recipes that scale the
    learning-rate schedule with the global batch), so under 2 processes a warmup ended twice as early
    (tests/test_training_processes.py).
    """
    from accelerate import Accelerator

    return Accelerator(cpu=not torch.cuda.is_available(), step_scheduler_with_optimizer=False)


def end_processes() -> None:
    """The last call of a job that may run in several processes: wait for all of them, take their process group down
    and leave without the interpreter's finalization; alone (no process group), it returns.

    Gloo's worker threads can still drop tensors during finalization and take the GIL from a dying interpreter, which
    aborts the process ("terminate called without an active exception", SIGABRT; pytorch/pytorch#179291, #190489)
    after its work is done, and torchrun then fails the whole job. Everything a run writes is written atomically
    before this, so skipping finalization loses nothing: output streams are flushed first.
    """
    from accelerate import PartialState

    state = PartialState()
    if state.num_processes == 1:
        return
    state.wait_for_everyone()
    state.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@dataclass
class Learner:
    model: object
    optimizer: object
    scheduler: object
    sampler: object | None = None  # a sharded role's full-weight copy that its rollouts decode from (core/sharding.py)


def learner(
    config: RLConfig, base: str | Path, accelerator, updates: int, saved: Path | None = None, sampler=None, base_name: str | None = None
) -> Learner:
    """A role starting from the HF model at `base` (a directory or hub id), or continuing `saved` (a role a
    checkpoint holds: an HF model, or with config.lora the LoRA adapter trained over `base`); it takes
    `updates` schedule steps in the whole run (its warmup may be a share of them: RLConfig.warmup).
    A sharded role samples from `sampler`, another role's full copy, when one is given (core/sharding.py).
    `base_name` is what a fresh adapter records as its base (default: config.model)."""
    from transformers import AutoModelForCausalLM, get_constant_schedule_with_warmup

    model = load_model(AutoModelForCausalLM, saved if saved and not config.lora else base, torch.float32)
    if config.lora:
        model = _with_adapter(model, config, saved, base_name or config.model)
    if config.gradient_checkpointing:  # only in train mode: the role's sampler (eval mode) decodes with its K/V cache as usual
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if config.sharding:
        model, full = sharded(model, config, accelerator, sampler)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = get_constant_schedule_with_warmup(optimizer, config.warmup(updates))
    if config.sharding:  # sharded by FSDP itself: accelerate prepares (and saves) only the schedule
        return Learner(model, optimizer, accelerator.prepare(scheduler), full)
    return Learner(*accelerator.prepare(model, optimizer, scheduler))


def _with_adapter(model, config: RLConfig, saved: Path | None, base_name: str):
    """peft's LoRA over the frozen base: a fresh adapter (seeded by the run's torch seed), or the saved one continued.

    The adapter records its starting model's name as its base (not this machine's cache path), so
    `cfbench eval --ckpt` of a checkpoint finds the base anywhere (harness/checkpoints.py).
    """
    from peft import LoraConfig, PeftModel, get_peft_model

    if saved is not None:
        return PeftModel.from_pretrained(model, saved, is_trainable=True)
    lora = config.lora
    settings = LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.target_modules), task_type="CAUSAL_LM"
    )
    model = get_peft_model(model, settings)
    model.peft_config["default"].base_model_name_or_path = base_name
    return model


def start_roles(
    config: RLConfig, out: Path, start: int, accelerator, updates: dict[str, int]
) -> tuple[dict[str, ResolvedCheckpoint], object, dict, dict]:
    """(each role's starting checkpoint, tokenizer, roles, each role's KL reference) of a run at `start`: every
    role (`updates`: name -> its scheduled updates; "main" is the main policy) from its starting model
    (config.start_model) or checkpoint-`start`, with its optimizer, scheduler and RNG restored, and the run's
    metrics cut back to `start`. Roles with the same starting model share one KL reference."""
    from transformers import AutoTokenizer

    torch.manual_seed(config.seed)  # a fresh LoRA adapter's initial weights come from it
    starts = {name: resolve(config.start_model(name)) for name in updates}
    tokenizer = AutoTokenizer.from_pretrained(starts["main"].location)
    roles: dict[str, Learner] = {}
    for name, n in updates.items():  # sharded roles share one sampler copy (core/sharding.py)
        shared = next(iter(roles.values())).sampler if roles else None
        location = starts[name].location
        roles[name] = learner(config, location, accelerator, n, resume_from(out, start, name), shared, config.start_model(name))
    by_start = {location: reference_model(config, location, accelerator) for location in dict.fromkeys(c.location for c in starts.values())}
    references = {name: by_start[starts[name].location] for name in updates}
    check_space(accelerator, roles, out)
    if start:
        restore(accelerator, out / f"checkpoint-{start}", roles)
    if accelerator.is_main_process:
        keep_rows_before(out / "metrics.jsonl", start)
    return starts, tokenizer, roles, references


def sampler(
    accelerator,
    role: Learner,
    tokens,
    ckpt,
    config: RLConfig,
    step: int,
    stream: str,
    served: AdapterSync | None = None,
    refreshed: bool = True,
    name: str | None = None,
):
    """An engine sampling from the role's current weights; its seed depends only on (seed, step, stream).
    In process (hf), or with `served` (knob rollout_server) the rollout server with the role's adapter
    loaded as `name` (default: the stream; core/served.py). A sharded role samples from its full copy,
    refreshed from the shards here (every process at once) unless `refreshed` is false: a copy shared
    by several roles is refreshed before each use instead (ready_to_sample)."""
    seed = int.from_bytes(hashlib.sha256(f"{config.seed}:{step}:{stream}".encode()).digest()[:8], "big")
    role.model.eval()
    if served is not None:
        return served.engine(accelerator, accelerator.unwrap_model(role.model), ckpt, config, step, name or stream, seed)
    if refreshed:
        ready_to_sample(role)
    model = accelerator.unwrap_model(role.model) if role.sampler is None else role.sampler
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return HFBackend(model, tokens, ckpt=ckpt, dtype=dtype, temperature=config.temperature, seed=seed)


def process_stream(stream: str, accelerator) -> str:
    """This process's sampler stream when every process samples its own share of a batch (selfevolve.run.spread):
    the same seed in two processes would give the answers in the same row of their shares the same draws (the same
    first token at least), so a GRPO group or an MSV majority would hold fewer independent answers than it counts.
    A single process keeps `stream` itself, so its runs sample as they always did."""
    return stream if accelerator.num_processes == 1 else f"{stream}-{accelerator.process_index}"


def ready_to_sample(role: Learner) -> None:
    """Put a sharded role's current weights into the sampler copy it shares (every process at once); nothing for others."""
    if role.sampler is not None:
        refresh(role.model, role.sampler)


def saved_weights(accelerator, role: Learner) -> tuple[object, dict | None]:
    """(an HF model to save, the state dict to save in place of its own, or None): a sharded role's float32 weights are
    gathered on the main process (every process must call this at the same point), its sampler lends the config."""
    if role.sampler is None:
        return accelerator.unwrap_model(role.model), None
    return role.sampler, full_state(role.model)


def checkpoints(out: Path) -> list[tuple[int, Path]]:
    """The run's checkpoint-N directories by step (a copy named checkpoint-3-old is not one)."""
    return sorted((int(m.group(1)), p) for p in out.glob("checkpoint-*") if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)))


def drop_partial_saves(out: Path) -> None:
    """Remove what a save killed mid-write left (.checkpoint-N.tmp): never a checkpoint, and it holds disk."""
    for partial in out.glob(".checkpoint-*.tmp"):
        shutil.rmtree(partial)


def role_dir(checkpoint: Path, name: str) -> Path:
    """Where role `name` lives in a checkpoint: the main policy ("main") at the top, every other role in its sub-directory."""
    return checkpoint if name == "main" else checkpoint / name


def resume_from(out: Path, start: int, name: str) -> Path | None:
    """What role `name` continues: checkpoint-`start`'s copy, or None (a fresh role)."""
    return role_dir(out / f"checkpoint-{start}", name) if start else None


def restore(accelerator, checkpoint: Path, roles: dict[str, Learner]) -> None:
    """Optimizer, scheduler and RNG state of every role from checkpoint/state; the weights came with `resume_from`.

    States written before the weights were stored once still hold model files; they are not read. A sharded
    role's optimizer state is its own file there (core/sharding.py), sharded again as it is read.
    """
    handle = accelerator.register_load_state_pre_hook(lambda models, input_dir: models.clear())
    try:
        accelerator.load_state(str(checkpoint / "state"))
    finally:
        handle.remove()
    for name, role in roles.items():
        if role.sampler is not None:
            load_optimizer(role.model, role.optimizer, optimizer_file(checkpoint / "state", name), accelerator.is_main_process)


def check_space(accelerator, roles: dict[str, Learner], out: Path) -> None:
    """Refuse, before writing, a checkpoint the disk cannot hold: every role's trained weights and AdamW's two moments.

    Called when a run starts (fail before the work, not after it) and before every save. The main
    process reads the free space and every process decides on that number, so all stop together.
    """
    need = sum(3 * p.numel() * p.element_size() for role in roles.values() for p in role.model.parameters() if p.requires_grad)
    need += (16 << 20) * len(roles)
    [free] = broadcast_object_list([shutil.disk_usage(out).free if accelerator.is_main_process else None])
    if free < need:
        raise CfbenchError(
            f"a checkpoint of this run needs about {need / 1e9:.2f} GB at {out} and {free / 1e9:.2f} GB are free; "
            "free some space, then run again (--resume continues from the last checkpoint, which is intact)"
        )


def save(accelerator, roles: dict[str, Learner], tokenizer, out: Path, step: int, record: dict) -> Path:
    """checkpoint-N written beside, then moved into place: a crash never leaves a half checkpoint.

    roles["main"] is the main policy (top level); other names become sub-directories. The main process
    writes the HF models; every process adds its part of the accelerate state. A failed write
    (a full disk, say) removes what it had written.
    """
    check_space(accelerator, roles, out)
    final = out / f"checkpoint-{step}"
    tmp = out / f".checkpoint-{step}.tmp"
    try:
        models = {name: saved_weights(accelerator, role) for name, role in roles.items()}  # every process: sharded roles gather
        if accelerator.is_main_process:
            for name, (model, weights) in models.items():
                # An adapter's embeddings are never trained here; peft's "auto" would look its base up on the hub to check.
                adapter = {"save_embedding_layers": False} if hasattr(model, "peft_config") else {}
                state = {"state_dict": weights} if weights is not None else {}
                model.save_pretrained(role_dir(tmp, name), safe_serialization=True, **adapter, **state)
                tokenizer.save_pretrained(role_dir(tmp, name))
        accelerator.wait_for_everyone()
        handle = accelerator.register_save_state_pre_hook(lambda models, weights, output_dir: weights.clear())  # stored once, above
        try:
            accelerator.save_state(str(tmp / "state"))
        finally:
            handle.remove()
        for name, role in roles.items():
            if role.sampler is not None:
                save_optimizer(role.model, role.optimizer, optimizer_file(tmp / "state", name), accelerator.is_main_process)
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
