"""`sharding: "fsdp"`: a role's weights, gradients and AdamW moments sharded across the run's processes (ZeRO-3).

torch's FSDP2 (`fully_shard`) shards each decoder layer and the rest of the model as its own unit;
a forward gathers one unit's weights at a time and backward reduce-scatters its gradients, so a
process holds 1/N of the training state (`cfbench train --plan`, "sharded"). With `bf16` the
units compute in bfloat16 (FSDP's MixedPrecisionPolicy) over float32 master weights, gradients
reduced in float32, as DeepSpeed's bf16 ZeRO-3 does.

Rollouts cannot come from the sharded model: every forward of a sharded unit is a collective,
and each process decodes its own prompts for its own number of steps. So a sharded role keeps a
full copy, the sampler (in bfloat16 with `bf16`), that the hf engine decodes from; `refresh`
copies the shards into it (every process at once) before each step's rollouts. The roles of a
self-evolution run share one such copy, refreshed from the role about to sample before each of its
rollouts (selfevolve/run.py). That copy is what `--plan` counts as "rollout sampler weights" and
what a vLLM engine would hold. A checkpoint is written from the float32 master weights gathered on
the main process (`full_state`), never from the sampler.

FSDP2 is used directly, not through accelerate: accelerate's FSDP plugin is for GPUs (on a CPU it
falls back to data-parallel), and this path is tested on CPU processes (gloo). Its checkpoints are
the same as a replicated role's: the full HF model, plus the role's AdamW state gathered whole into
state/ (torch.distributed.checkpoint's full state dicts), which `cfbench eval` and a resume read.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from cfbench.harness.errors import CfbenchError

SHARDINGS = ("fsdp",)


def shard(model, bf16: bool) -> None:
    """Shard `model` in place across the default process group: every decoder layer, then the rest (embeddings,
    final norm, head) as the root unit."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    for layer in model.get_decoder().layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


def check_processes(accelerator) -> None:
    if accelerator.num_processes < 2:
        raise CfbenchError(
            "knob sharding 'fsdp' shards a role across the run's processes, and this run has one: launch it with "
            "`accelerate launch --num_processes N` or `torchrun --nproc-per-node N` (N >= 2), or remove the knob"
        )


def sharded(model, config, accelerator, sampler=None):
    """(the sharded trained model, its full-weight sampler copy) of a role built as `model` (a plain HF model).
    `sampler`: another role's copy to share (roles of one model need one copy: it holds a role's weights
    while that role samples, refreshed before each use)."""
    check_processes(accelerator)
    model.to(accelerator.device)
    if sampler is None:
        sampler = copy.deepcopy(model).eval().requires_grad_(False)
        if config.bf16:
            sampler.to(torch.bfloat16)
    shard(model, config.bf16)
    return model, sampler


@torch.no_grad()
def refresh(model, sampler) -> None:
    """Copy the sharded `model`'s current weights into its full `sampler` copy, one gathered parameter at a time (a
    whole gathered state dict would be a second full copy beside the sampler); every process calls it together."""
    into = dict(sampler.named_parameters())
    for name, param in model.named_parameters():
        into[name].copy_(param.full_tensor())


def full_state(model) -> dict:
    """The sharded `model`'s float32 weights gathered whole on the main process (others get an empty dict); every
    process calls it together."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def optimizer_file(state: Path, name: str) -> Path:
    return state / f"sharded-optimizer-{name}.pt"


def save_optimizer(model, optimizer, path: Path, main: bool) -> None:
    """The role's AdamW state gathered whole and written by the main process (every process calls it together)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    whole = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if main:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(whole, path)


def load_optimizer(model, optimizer, path: Path, main: bool) -> None:
    """The AdamW state `save_optimizer` wrote, read by the main process and sharded to every process."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    whole = torch.load(path, weights_only=True) if main else {}
    set_optimizer_state_dict(
        model, optimizer, optim_state_dict=whole, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    )
