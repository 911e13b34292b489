"""`cfbench train --plan`: what a treatment's run takes before it starts, at every scale.

The schedule (steps, rounds, prompts and rollouts per step, rollout tokens), an estimated time and the command that
launches it. The time comes from measured costs on CPU (the study's 135M runs on 2 cores, `CPU_SECONDS_PER_ROLLOUT`)
scaled by rollouts, generated tokens and parameters; on GPUs (the paper scale) from the step's FLOPs at stated
shares of an H100-class GPU's bf16 peak (`GPU_PEAK_FLOPS`, `GPU_UTILISATION`): a rough guide, not a measurement.
The model's shape is read from its config.json (a bundled model, a local directory, or a hub id already in the
local Hugging Face cache); `SHAPES` holds the paper models' for a machine that has not downloaded them.

On GPUs, will the run fit in memory, and under which layout? Per GPU, for each trained role (Search-R1's policy;
Dr. Zero's proposer and main solver; CrossFit's two auxiliary solvers) and a frozen reference when the config sets `kl_coef`:
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

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

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
    query_gate: bool = True  # Qwen3.5's attention gates its output with a second query-sized projection; Llama's does not

    @property
    def params(self) -> int:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        mixer = self.hidden * ((1 + self.query_gate) * q + 2 * kv) + q * self.hidden  # query (+ output gate), k, v, o
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
# Measured at the cpu scale on 2 cores (leaderboards/fixed1325/study/*/metrics.jsonl, cpu_s of each step: 2 prompts x
# 5 samples = 10 rollouts of at most 3 turns x 128 new tokens, SmolLM2-135M with LoRA r 8): a Search-R1 step 79.7 CPU-s
# (the mean of its 75 steps); Dr. Zero's proposer step 71.3 (the median of 54) and a solver step that trains on admitted
# questions 134.9 (the mean of 38; one with none admitted costs about 27, so a run's solver time is at most this).
# tests/test_training_plan.py reads them back from those files.
CPU_SECONDS_PER_ROLLOUT = {"policy": 7.97, "proposer": 7.13, "solver": 13.49}
MEASURED_ROLLOUTS, MEASURED_TOKENS, MEASURED_PARAMS = 10, 3 * 128, 134_479_872  # SmolLM2-135M as Shape.params counts it
GPU_PEAK_FLOPS = 989e12  # dense bf16 of an H100 SXM, the GPU the paper-scale plans assume
# Shares of that peak assumed: an update is compute-bound (40%, a common FSDP figure); sampling decodes token by
# token and is memory-bound (10% of peak, a vLLM-class engine; cfbench's hf engine samples slower).
GPU_UTILISATION = {"update": 0.40, "rollout": 0.10}
ACCELERATE_CONFIG = "cfbench/training/configs/accelerate-ddp.yaml"
LAYOUTS = (("replicated", "fp32"), ("replicated", "bf16"), ("sharded", "fp32"), ("sharded", "bf16"))


def shape_of(model: str) -> tuple[Shape, str]:
    """The model's shape and where it was read: its config.json when at hand, else the built-in SHAPES."""
    path = config_json(model)
    if path is not None:
        return shape_from_config(json.loads(path.read_text()), path), str(path)
    if model in SHAPES:
        return SHAPES[model], "cfbench's table (its config.json is not in the local Hugging Face cache)"
    raise CfbenchError(
        f"--plan needs the shape of {model!r}: no config.json for it here; fetch it first "
        f"(huggingface-cli download {model} config.json) or set the config's model to a local checkpoint directory"
    )


def config_json(model: str) -> Path | None:
    """config.json of a bundled model (made on first use, as eval does), a local checkpoint directory or a cached hub id."""
    from cfbench.harness.checkpoints import ADAPTED, BUNDLED, materialise

    if model in ADAPTED or model in BUNDLED:  # an adapter keeps its base's shape
        return materialise(ADAPTED[model].base if model in ADAPTED else model) / "config.json"
    if Path(model).is_dir():
        path = Path(model) / "config.json"
        if not path.is_file():
            raise CfbenchError(f"model {model}: no config.json in the directory; pass a checkpoint directory")
        return path
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model, "config.json")
    return Path(cached) if isinstance(cached, str) else None


def shape_from_config(config: dict, where: Path | str) -> Shape:
    """A decoder's Shape from transformers' config.json fields (a multimodal config's text_config when it has one)."""
    text = config.get("text_config") or config
    try:
        heads = text["num_attention_heads"]
        return Shape(
            layers=text["num_hidden_layers"],
            hidden=text["hidden_size"],
            intermediate=text["intermediate_size"],
            heads=heads,
            kv_heads=text.get("num_key_value_heads") or heads,
            head_dim=text.get("head_dim") or text["hidden_size"] // heads,
            vocab=text["vocab_size"],
            tied=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            attention_every=text.get("full_attention_interval", 1),
            linear_v_heads=text.get("linear_num_value_heads", 0),
            linear_head_dim=text.get("linear_value_head_dim", 0),
            query_gate=bool(text.get("attn_output_gate", False)),
        )
    except KeyError as e:
        raise CfbenchError(f"{where}: no field {e.args[0]!r}; --plan reads decoder shapes (layers, hidden size, heads)") from None


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


def on_gpus(config: RLConfig) -> bool:
    """The cpu and cpu-smoke scales train on CPU cores; the paper scale on GPUs."""
    return not config.scale.startswith("cpu")


def phase_steps(config: RLConfig) -> dict[str, int]:
    """Steps of each phase the run takes: Search-R1's policy steps, or self-evolution's proposer and solver steps in
    schedule order (round by round, proposer steps first) up to `steps` when it cuts the schedule short."""
    if not isinstance(config, SelfEvolutionConfig):
        return {"policy": config.steps}
    left = config.scheduled_steps if config.steps is None else config.steps
    counts = {"proposer": 0, "solver": 0}
    for _ in range(config.rounds):
        for phase, n in (("proposer", config.proposer_steps), ("solver", config.solver_steps)):
            counts[phase] += min(n, left)
            left -= min(n, left)
    return counts


def schedule(config: RLConfig) -> list[str]:
    """Steps, rounds, prompts per step and rollout tokens."""
    steps = phase_steps(config)
    total, rollouts = sum(steps.values()), config.prompts_per_step * config.samples_per_prompt
    turns = config.knobs.max_searches + 1
    generated = turns * config.knobs.max_new_tokens
    if isinstance(config, SelfEvolutionConfig):
        head = (
            f"schedule: {total} steps: {config.rounds} rounds of {config.proposer_steps} proposer + {config.solver_steps} solver "
            f"steps ({steps['proposer']} proposer, {steps['solver']} solver steps in this run); each step "
            f"{config.prompts_per_step} source tasks x {config.samples_per_prompt} samples = {rollouts} rollouts"
        )
    else:
        prompts = f"{config.prompts_per_step} prompt{'s' if config.prompts_per_step != 1 else ''}"
        head = (
            f"schedule: {total} steps of {prompts} x {config.samples_per_prompt} samples = {rollouts} rollouts a step, "
            f"{total * rollouts:,} in all"
        )
    return [
        head,
        f"rollout tokens: at most {turns} turns x {config.knobs.max_new_tokens} new tokens = {generated} generated per rollout "
        f"(context up to {config.knobs.max_context_tokens}); at most {rollouts * generated:,} a step, "
        f"{total * rollouts * generated:,} in the run",
    ]


def estimated_time(config: RLConfig, shape: Shape, gpus: int, cores: int) -> str:
    """On CPU: the measured CPU-seconds per rollout scaled by rollouts, generated tokens and parameters. On GPUs: each
    step's FLOPs (sampling 2 N per context token; the update 6 N, 8 N with checkpointing, plus 2 N for a frozen
    reference) at GPU_UTILISATION of GPU_PEAK_FLOPS on every GPU."""
    steps = phase_steps(config)
    rollouts = config.prompts_per_step * config.samples_per_prompt
    if on_gpus(config):
        tokens = rollouts * config.knobs.max_context_tokens  # every context token at most once per rollout
        update = (8 if config.gradient_checkpointing else 6) + (2 if config.objective.kl_coef else 0)
        seconds = 0.0
        for phase, n in steps.items():
            updated = 3 if phase == "solver" and config.crossfit else 1  # CrossFit's solver steps also update 2 auxiliary solvers
            flops = {"rollout": 2 * shape.params * tokens, "update": updated * update * shape.params * tokens}
            seconds += n * sum(flops[k] / (gpus * GPU_PEAK_FLOPS * GPU_UTILISATION[k]) for k in flops)
        per_step = seconds / max(sum(steps.values()), 1)
        return (
            f"time: about {seconds / 3600:,.0f} h on {gpus} GPUs ({per_step:.0f} s a step; assumed: "
            f"{GPU_PEAK_FLOPS / 1e12:.0f} TFLOP/s bf16 per GPU, {GPU_UTILISATION['update']:.0%} of it in the update "
            f"and {GPU_UTILISATION['rollout']:.0%} in sampling)"
        )
    generated = (config.knobs.max_searches + 1) * config.knobs.max_new_tokens
    scale = rollouts / MEASURED_ROLLOUTS * generated / MEASURED_TOKENS * shape.params / MEASURED_PARAMS
    cpu_s = sum(n * CPU_SECONDS_PER_ROLLOUT[phase] * MEASURED_ROLLOUTS for phase, n in steps.items()) * scale
    bound = "; at most: a solver step with no admitted question costs less" if "solver" in steps else ""
    return (
        f"time: about {cpu_s / 3600:.2f} CPU-hours, about {cpu_s / cores / 3600:.2f} h on {cores} cores (from the study's measured "
        f"steps on 2 cores: "
        + ", ".join(f"{p} {CPU_SECONDS_PER_ROLLOUT[p] * MEASURED_ROLLOUTS:.0f} CPU-s" for p in steps)
        + f" per {MEASURED_ROLLOUTS} rollouts of {MEASURED_TOKENS} tokens at 135M{bound})"
    )


def launch_command(config: RLConfig, gpus: int, cores: int, options: tuple[str, ...] = ()) -> str:
    """The command that starts the planned run: cfbench on CPU, accelerate with one process per GPU on GPUs."""
    train = ["train", "--treatment", config.treatment, "--scale", config.scale, "--out", f"runs/{config.treatment}-{config.scale}"]
    if on_gpus(config):
        return shlex.join(
            ["accelerate", "launch", "--config_file", ACCELERATE_CONFIG, "--num_processes", str(gpus)]
            + ["-m", "cfbench.cli", *train, *options]
        )
    return shlex.join(["cfbench", *train, *options, "--threads", str(cores)])


def plan(config: TrainingConfig, gpus: int, gpu_memory: float, cores: int = 2, options: tuple[str, ...] = ()) -> list[str]:
    """The plan's lines: schedule, time and launch command, then on GPUs the memory per GPU; raises CfbenchError naming
    the knob when not even the best layout fits. `options`: the train options that change the run (--steps, ...)."""
    if not isinstance(config, RLConfig):
        raise CfbenchError(f"--plan covers the RL treatments (search-r1 and the self-evolution ones), not {config.treatment!r}")
    shape, source = shape_of(config.model)
    head = [
        f"{config.model}: {shape.params / 1e9:.2f} B parameters, {shape.layers} layers ({shape.attention_layers} full attention), "
        f"vocabulary {shape.vocab}; shape from {source}",
        *schedule(config),
        estimated_time(config, shape, gpus, cores),
        "launch: " + launch_command(config, gpus, cores, options),
    ]
    if not on_gpus(config):
        return [f"{config.treatment} {config.scale} on {cores} CPU cores", *head]
    usable = gpu_memory * GB * (1 - RESERVE)
    trained, frozen = roles(config)
    table = {layout: estimate(config, shape, gpus, layout[0] == "sharded", layout[1]) for layout in LAYOUTS}
    lines = [
        *head,
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
