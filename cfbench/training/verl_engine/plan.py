"""`cfbench train --plan --engine verl`: per-GPU memory in verl's layout, the recipe.py configuration's.

verl's hybrid engine puts the actor and vLLM on the same GPUs and alternates them:
    rollout  vLLM takes rollout.gpu_memory_utilization of each GPU up front (its bf16 weights, tensor
             parallel 1, and a K/V cache plus, for Qwen3.5's Gated DeltaNet layers, recurrent state in the
             rest), while the actor's and reference's parameters and the optimizer are offloaded to CPU
             memory (recipe.OFFLOAD); what does not fit in the cache waits: the plan says how many rows of
             the longest context run at once against the rows a GPU samples per step;
    update   vLLM sleeps (its memory freed) and one role trains: its FSDP2-sharded training state (16 bytes
             per parameter / GPUs, training/plan.py's accounting, the optimizer brought back for its step),
             the reference's bf16 shard when the config has a KL term, activations of one micro-batch with
             gradient checkpointing, and log-probs in chunks (model.use_fused_kernels). A self-evolution
             role that is not training stays offloaded, so one role counts.
Sequences are at most a full context, one turn and its observation long. The terms and the 10% kept back
are training/plan.py's; vLLM's own activations and CUDA graphs come out of its cache room and are not counted.
"""

from __future__ import annotations

import math

from cfbench.harness.errors import CfbenchError
from cfbench.training.config.classes import RLConfig, TrainingConfig
from cfbench.training.plan import GB, LOGPROB_CHUNK, RESERVE, shape_of
from cfbench.training.verl_engine.recipe import refuse_unsupported, rollout_memory

BF16 = 2


def verl_plan(config: TrainingConfig, gpus: int, gpu_memory: float) -> list[str]:
    if not isinstance(config, RLConfig):
        raise CfbenchError(f"--plan covers the RL treatments (search-r1 and the self-evolution ones), not {config.treatment!r}")
    refuse_unsupported(config)
    (shape, _), k = shape_of(config.model), config.knobs
    p, usable, share = shape.params, gpu_memory * GB * (1 - RESERVE), rollout_memory(config)
    vllm = share * gpu_memory * GB
    length = k.max_context_tokens + k.max_new_tokens  # vLLM's max_model_len
    per_row = length * 2 * shape.attention_layers * shape.kv_heads * shape.head_dim * BF16
    per_row += (shape.layers - shape.attention_layers) * shape.linear_v_heads * shape.linear_head_dim**2 * BF16
    room = vllm - p * BF16
    at_once = max(0, math.floor(room / per_row))
    rows = -(-config.prompts_per_step * config.samples_per_prompt // gpus)
    b, s, h = config.micro_batch, k.max_context_tokens + k.max_new_tokens + k.max_obs_tokens, shape.hidden
    layer = b * s * (16 * h + 8 * shape.intermediate) * BF16 / 2
    terms = {
        "training state": 16 * p / gpus,
        "reference": BF16 * p / gpus if config.objective.kl_coef else 0.0,
        "activations (checkpointing)": shape.layers * b * s * h * BF16 + layer if config.gradient_checkpointing else shape.layers * layer,
        "log-probs": (min(b * s, LOGPROB_CHUNK) if config.logprob_chunk else b * s) * shape.vocab * 10,
    }
    update = sum(terms.values())
    lines = [
        f"verl layout (--engine verl) on {gpus} x {gpu_memory:g} GB ({usable / GB:.1f} GB usable): vLLM and one training role "
        "take turns on every GPU",
        f"rollout: vLLM holds {share:g} x {gpu_memory:g} GB = {vllm / GB:.1f} GB: weights {p * BF16 / GB:.1f} GB, cache room "
        f"{room / GB:.1f} GB = {at_once} rows of {length} tokens at once ({per_row / GB:.3f} GB each); a step samples {rows} rows per GPU",
        "update: " + " + ".join(f"{name} {value / GB:.1f}" for name, value in terms.items() if value) + f" = {update / GB:.1f} GB per GPU",
    ]
    if room < per_row:
        raise CfbenchError(
            f"{config.model} on verl: vLLM's {share:g} of {gpu_memory:g} GB leaves no room for one {length}-token row after its "
            f"{p * BF16 / GB:.1f} GB of weights; use GPUs with more memory or a smaller model"
        )
    if update > usable:
        term = max(terms, key=terms.get)
        knob = "--gpus" if term in ("training state", "reference") else "knob micro_batch or knobs.max_context_tokens"
        raise CfbenchError(
            f"{config.model} {config.treatment} on verl: its update needs {update / GB:.1f} GB per GPU of {usable / GB:.1f} usable, "
            f"{terms[term] / GB:.1f} GB of it {term}; change {knob}"
        )
    lines.append(f"fits: update {update / GB:.1f} GB and rollout {vllm / GB:.1f} GB per GPU, each within {usable / GB:.1f} GB")
    return lines
