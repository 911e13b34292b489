"""`cfbench train --plan`: will a treatment's paper-scale run fit in GPU memory, and under which layout?

Per GPU, for each trained role (Search-R1's policy; Dr. Zero's proposer and main solver; CrossFit's
two auxiliary solvers) and a frozen reference when the config sets `kl_coef`:
    weights, gradients, AdamW state: 16 bytes/parameter either way (fp32: 4 + 4 + 8; bf16 mixed
        precision: 2 + 2 + 12 for the fp32 master copy and moments, ZeRO's accounting); ZeRO-3/FSDP
        divides them by the GPU count (the trainer's knob `sharding: "fsdp"`), replication (DDP) does not; with a
        `lora` section only the adapters have gradients and moments (each role keeps its copy of the weights);
    activations of one micro-batch (micro_batch rows x max_context_tokens): Korthikanti et al. 2022's
        per-layer count adapted to SwiGLU, s b (16 h + 8 i) bytes in 16-bit, for every layer without
        gradient checkpointing; with it, each layer's 16-bit input plus one layer recomputed;
    log-probs: 16-bit logits + fp32 logits + fp32 log-softmax (10 bytes per vocabulary entry) for the
        whole micro-batch, or for `LOGPROB_CHUNK` tokens at a time when computed in chunks;
    rollouts: a sampling copy of the weights (vLLM-style, one role at a time), the K/V cache of the
        full-attention layers and the Gated DeltaNet layers' recurrent state, for every row a GPU
        samples at once (prompts x samples / GPUs), each up to max_context_tokens.
The update and the rollout are separate phases (the sampler sleeps during the update, as with vLLM's
sleep mode or verl's hybrid engine), so a GPU needs the larger of the two; 10% is kept for the CUDA
context, communication buffers and fragmentation. A run fits if the best layout (sharded, bf16,
checkpointing, chunked log-probs) fits; otherwise the plan refuses and names the knob to change.
"""

from __future__ import annotations

from dataclasses import dataclass

from cfbench.harness.errors import CfbenchError
from cfbench.training.config.classes import RLConfig, SelfEvolutionConfig, TrainingConfig

GB = 1e9
RESERVE = 0.10
LOGPROB_CHUNK = 1024  # tokens per log-softmax chunk (recomputed in backward, like Liger's fused linear cross-entropy)


@dataclass(frozen=True)
class Shape:
    """A decoder's shape. Qwen3.5 is hybrid: one full-attention layer every `attention_every` layers, Gated
    DeltaNet elsewhere; mixer parameters are counted as a gated-query attention block's for every layer
    (the DeltaNet projections are within about 15% of it and the MLP holds two thirds of a layer)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    attention_every: int = 1
    linear_v_heads: int = 0
    linear_head_dim: int = 0

    @property
    def params(self) -> int:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        mixer = self.hidden * (2 * q + 2 * kv) + q * self.hidden  # query + output gate, k, v, o
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (mixer + mlp) + self.vocab * self.hidden * (1 if self.tied else 2)

    def adapter_params(self, r: int, targets: tuple[str, ...]) -> int:
        """Parameters of LoRA adapters of rank r on the named projections of every layer (r x (in + out) each)."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        sides = {"q_proj": (h, 2 * q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, i), "up_proj": (h, i)}
        sides["down_proj"] = (i, h)
        return self.layers * sum(r * sum(sides[t]) for t in targets if t in sides)

    @property
    def attention_layers(self) -> int:
        return self.layers // self.attention_every


# Qwen3.5 language-model shapes (the vision encoder is not trained here and not counted).
# 4B: https://apxml.com/models/qwen35-4b (32 layers, hidden 2560, FFN 9216, 16 Q / 4 KV heads of 256, vocab 248320,
#     8 x (3 DeltaNet + 1 attention)); 9B: https://docs.vultr.com/models/alibaba-qwen-35/qwen3.5-9b/nvidia (32 layers,
#     hidden 4096, FFN 12288, 16 / 4 heads); tied embeddings for 4B and head_dim 256 from the qwen35 GGUF architecture
#     notes (github.com/ave-veritas-et-enodatio/go-inference-lab-bench, models/arch/qwen35.arch.toml); DeltaNet
#     32 value heads of 128 from the Qwen3.5 family config (github.com/mlc-ai/web-llm/issues/778). Untied 9B
#     embeddings are an assumption (the larger estimate). Read config.json when the weights are at hand.
SHAPES = {
    "Qwen/Qwen3.5-4B": Shape(32, 2560, 9216, 16, 4, 256, 248320, tied=True, attention_every=4, linear_v_heads=32, linear_head_dim=128),
    "Qwen/Qwen3.5-9B": Shape(32, 4096, 12288, 16, 4, 256, 248320, tied=False, attention_every=4, linear_v_heads=32, linear_head_dim=128),
}
LAYOUTS = (("replicated", "fp32"), ("replicated", "bf16"), ("sharded", "fp32"), ("sharded", "bf16"))


def shape_of(model: str) -> Shape:
    if model not in SHAPES:
        raise CfbenchError(f"--plan knows the shapes of {', '.join(SHAPES)}, not {model!r}; add it to SHAPES in cfbench/training/plan.py")
    return SHAPES[model]


def roles(config: RLConfig) -> tuple[list[str], list[str]]:
    """(trained roles, frozen roles) of the treatment."""
    if isinstance(config, SelfEvolutionConfig):
        trained = ["proposer", "solver"] + (["aux-0", "aux-1"] if config.crossfit else [])
    else:
        trained = ["policy"]
    return trained, ["reference"] if config.objective.kl_coef else []


def rollout_rows(config: RLConfig, gpus: int) -> int:
    """Rows one GPU samples at once: a Search-R1 step's prompts x samples, or the self-evolution step's largest
    phase (the solver scoring every proposal samples_per_prompt times), split over the GPUs, at most rollout_rows."""
    rows = -(-config.prompts_per_step * config.samples_per_prompt // gpus)
    return min(rows, config.rollout_rows) if config.rollout_rows else rows


def estimate(config: RLConfig, shape: Shape, gpus: int, sharded: bool, precision: str) -> dict[str, float]:
    """Bytes per GPU of each term for one layout."""
    trained, frozen = roles(config)
    p, split = shape.params, (gpus if sharded else 1)
    learnt = shape.adapter_params(config.lora.r, config.lora.target_modules) if config.lora else p  # what has gradients and moments
    width = 2 if precision == "bf16" else 4
    b, s, h, v = config.micro_batch, config.knobs.max_context_tokens, shape.hidden, shape.vocab
    layer = b * s * (16 * h + 8 * shape.intermediate) * width / 2
    rows = rollout_rows(config, gpus)
    return {
        "weights": len(trained) * p * width / split,
        "gradients": len(trained) * learnt * width / split,
        "optimizer": len(trained) * learnt * (16 - 2 * width) / split,
        "frozen reference": len(frozen) * p * width / split,
        "activations, no checkpointing": shape.layers * layer,
        "activations, checkpointing": shape.layers * b * s * h * width + layer,
        "log-probs, whole vocabulary": b * s * v * 10,
        f"log-probs, {LOGPROB_CHUNK}-token chunks": min(b * s, LOGPROB_CHUNK) * v * 10,
        "rollout sampler weights": p * width,
        "rollout KV cache": rows * s * 2 * shape.attention_layers * shape.kv_heads * shape.head_dim * width,
        "rollout recurrent state": rows * (shape.layers - shape.attention_layers) * shape.linear_v_heads * shape.linear_head_dim**2 * width,
    }


def phases(terms: dict[str, float], checkpointing: bool, chunked: bool) -> dict[str, float]:
    """Peak bytes of the update and of the rollout phase (gradients are freed between steps)."""
    state = terms["weights"] + terms["optimizer"] + terms["frozen reference"]
    acts = terms["activations, checkpointing" if checkpointing else "activations, no checkpointing"]
    logits = terms[f"log-probs, {LOGPROB_CHUNK}-token chunks" if chunked else "log-probs, whole vocabulary"]
    rollout = terms["rollout sampler weights"] + terms["rollout KV cache"] + terms["rollout recurrent state"]
    return {"update": state + terms["gradients"] + acts + logits, "rollout": state + rollout}


def _knob(term: str) -> str:
    if term.startswith(("weights", "gradients", "optimizer", "frozen")):
        return "--gpus (ZeRO-3 divides the training state by the GPU count) or a smaller model"
    if term.startswith(("activations", "log-probs")):
        return "knob micro_batch (rows per forward/backward) or knobs.max_context_tokens"
    if term.startswith(("rollout KV", "rollout recurrent")):
        return "knob rollout_rows (rows sampled at once per GPU; by default prompts_per_step x samples_per_prompt / --gpus) or --gpus"
    return "--gpu-memory (a bigger GPU) or a smaller model"


def plan(config: TrainingConfig, gpus: int, gpu_memory: float) -> list[str]:
    """The plan's lines; raises CfbenchError naming the knob when not even the best layout fits."""
    if not isinstance(config, RLConfig):
        raise CfbenchError(f"--plan covers the RL treatments (search-r1 and the self-evolution ones), not {config.treatment!r}")
    shape = shape_of(config.model)
    usable = gpu_memory * GB * (1 - RESERVE)
    trained, frozen = roles(config)
    table = {layout: estimate(config, shape, gpus, layout[0] == "sharded", layout[1]) for layout in LAYOUTS}
    lines = [
        f"{config.model}: {shape.params / 1e9:.2f} B parameters, {shape.layers} layers ({shape.attention_layers} full attention), "
        f"vocabulary {shape.vocab}",
        f"{config.treatment} {config.scale} on {gpus} x {gpu_memory:g} GB ({usable / GB:.1f} GB usable, {RESERVE:.0%} kept); "
        f"trained roles: {', '.join(trained)}" + (f"; frozen: {', '.join(frozen)}" if frozen else ""),
        f"micro-batch {config.micro_batch} x {config.knobs.max_context_tokens} tokens; rollout "
        f"{rollout_rows(config, gpus)} rows per GPU at once",
        f"{'GB per GPU':<34}" + "".join(f"{p + ' ' + d:>17}" for p, d in LAYOUTS),
    ]
    lines += [f"{term:<34}" + "".join(f"{table[layout][term] / GB:>17.1f}" for layout in LAYOUTS) for term in table[LAYOUTS[0]]]
    for label, checkpointing, phase in (
        ("update peak, plain", False, "update"),
        ("update peak, checkpointing + chunks", True, "update"),
        ("rollout peak", True, "rollout"),
    ):
        peaks = [phases(table[layout], checkpointing, checkpointing)[phase] for layout in LAYOUTS]
        lines.append(f"{label:<34}" + "".join(f"{p / GB:>17.1f}" for p in peaks))
    fits = [max(phases(table[layout], True, True).values()) <= usable for layout in LAYOUTS]
    lines.append(f"{'fits (checkpointing + chunks)':<34}" + "".join(f"{'yes' if f else 'no':>17}" for f in fits))
    best = table[("sharded", "bf16")]
    peaks = phases(best, True, True)
    phase = max(peaks, key=peaks.get)
    if peaks[phase] > usable:
        state = ("weights", "optimizer", "frozen reference")
        during = (
            ("gradients", "activations, checkpointing", f"log-probs, {LOGPROB_CHUNK}-token chunks")
            if phase == "update"
            else ("rollout sampler weights", "rollout KV cache", "rollout recurrent state")
        )
        term = max(state + during, key=best.get)
        raise CfbenchError(
            f"{config.model} {config.treatment} does not fit on {gpus} x {gpu_memory:g} GB even sharded in bf16 with "
            f"checkpointing: its {phase} needs {peaks[phase] / GB:.1f} GB per GPU of {usable / GB:.1f} usable, "
            f"{best[term] / GB:.1f} GB of it {term}; change {_knob(term)}"
        )
    lines.append(as_configured(config, table, usable))
    lines.append(f"fits: sharded bf16 with gradient checkpointing and chunked log-probs needs {peaks[phase] / GB:.1f} GB per GPU ({phase})")
    return lines


def as_configured(config: RLConfig, table: dict, usable: float) -> str:
    """Whether the layout the config itself asks for fits (the table's best layout may be one the trainer cannot run for it)."""
    layout = ("sharded" if config.sharding else "replicated", "bf16" if config.bf16 else "fp32")
    peak = max(phases(table[layout], config.gradient_checkpointing, config.logprob_chunk is not None).values())
    verdict = f"as configured ({' '.join(layout)}): {peak / GB:.1f} GB per GPU, " + ("fits" if peak <= usable else "does not fit")
    if peak <= usable:
        return verdict
    return verdict + "; set knobs sharding 'fsdp' and bf16 true, gradient_checkpointing true and logprob_chunk"
