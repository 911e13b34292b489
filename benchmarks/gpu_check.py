"""GPU check for a machine with torch + transformers preinstalled, no network and no cfbench install (issue 23, item 6).

    PYTHONPATH=/tmp/site:. python benchmarks/gpu_check.py                 # one CUDA GPU, bf16, under 8 minutes on an H200
    PYTHONPATH=/tmp/site:. python benchmarks/gpu_check.py --device cpu --tiny   # the same code path on a CPU, 1-2 minutes

/tmp/site holds small wheels for what cfbench imports beyond torch/transformers/numpy on this path:
accelerate, bm25s, PyStemmer, rich (+ markdown-it-py, mdurl, pygments), click, psutil (accelerate's).
Nothing is downloaded:
  1. a byte-level BPE tokenizer is trained on the bundled corpus, given a ChatML template, and a small
     random Llama is built with it (a random model writes no tags, so every question spends all its
     generation calls: the heaviest decode the protocol allows);
  2. cfbench's hf engine runs the `mini` suite (70 questions) through the protocol's agent loop with the
     bundled corpus's BM25 index (built here), in one batch; prints generated tokens/s;
  3. three policy-gradient steps through cfbench's learner (accelerate, bf16 autocast on CUDA, gradient
     checkpointing) on those trajectories; prints trained tokens/s and peak GPU memory;
  4. on CUDA, the first 20 questions again in float32 on the GPU and on the CPU: how many trajectories
     agree token for token (the engine's CUDA path against the CPU path the tests check).
The summary block is printed last and written to $OUT/gpu_check.json when $OUT is set. It is a
speed and plumbing check, not a learning one: rewards alternate 1/0 inside each group of samples so
every step has non-zero advantages and real gradients.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

SIZES = {  # (hidden, layers, heads, kv heads, intermediate, vocabulary, tokenizer texts)
    "small": (256, 4, 4, 2, 768, 8192, 5000),
    "tiny": (64, 2, 2, 1, 128, 1024, 1000),
}


def build_model(out: Path, size: str) -> None:
    """A random Llama and a BPE tokenizer trained on the bundled corpus, saved as an HF checkpoint in `out`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from cfbench.harness.corpus import load_corpus

    hidden, layers, heads, kv_heads, intermediate, vocab, texts = SIZES[size]
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe.train_from_iterator(
        load_corpus().contents[:texts],
        trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tok.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=8192,
        initializer_range=0.2,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(out)


def rollouts(model_dir: Path, device: str, dtype: str, questions: int, knobs) -> tuple[list, dict]:
    """The mini suite (or its first `questions`) through the hf engine in one batch; returns trajectories and timing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cfbench.harness.agent import run_batch
    from cfbench.harness.backends.hf import HFBackend
    from cfbench.harness.backends.tokens import PromptTokens
    from cfbench.harness.checkpoints import load_model, resolve
    from cfbench.harness.retrievers.choose import retriever_for
    from cfbench.harness.suite import load_suite

    began = time.time()
    retriever = retriever_for("bm25")
    index_s = time.time() - began
    tokens = PromptTokens(AutoTokenizer.from_pretrained(model_dir))
    model = load_model(AutoModelForCausalLM, model_dir, getattr(torch, dtype)).to(device).eval()
    engine = HFBackend(model, tokens, ckpt=resolve(str(model_dir)), dtype=dtype)
    suite = list(load_suite("mini").questions)[:questions]
    _sync(device)
    began = time.time()
    trajectories = run_batch(suite, engine, retriever, knobs)
    _sync(device)
    seconds = time.time() - began
    generated = sum(len(tokens.tokenizer(t["generated"], add_special_tokens=False)["input_ids"]) for tr in trajectories for t in tr.turns)
    return trajectories, {
        "questions": len(suite),
        "generation_calls": sum(len(t.turns) for t in trajectories),
        "generated_tokens": generated,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(generated / seconds, 1),
        "bm25_index_s": round(index_s, 2),
    }


def train_steps(model_dir: Path, device: str, trajectories: list, steps: int, micro_batch: int) -> dict:
    """`steps` updates through cfbench's learner on the rollouts, with gradient checkpointing."""
    from accelerate import Accelerator
    from transformers import AutoTokenizer

    from cfbench.harness.backends.tokens import PromptTokens
    from cfbench.training.core.episodes import encode_episode
    from cfbench.training.core.learner import learner
    from cfbench.training.core.policy_update import update
    from cfbench.training.treatments import load_config

    accelerator = Accelerator(cpu=device == "cpu", mixed_precision="bf16" if device == "cuda" else "no")
    config = load_config("search-r1", "cpu-smoke") | {"learning_rate": 1e-5, "micro_batch": micro_batch}  # the plain objective
    role = learner(config, model_dir, accelerator, steps)
    accelerator.unwrap_model(role.model).gradient_checkpointing_enable()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokens = PromptTokens(tokenizer)
    group = 5
    episodes = [encode_episode(tokens, t.prompt, t.turns, float(i % 2), i // group) for i, t in enumerate(trajectories)]
    trained_tokens = sum(len(e.ids) for e in episodes)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, norms = [], []
    for _ in range(steps):
        _sync(device)
        began = time.time()
        grad_norm = update(role, accelerator, episodes, config, tokenizer.pad_token_id).grad_norm
        _sync(device)
        times.append(time.time() - began)
        norms.append(round(grad_norm, 4))
    steady = times[1:] or times  # the first step includes kernel warm-up
    return {
        "steps": steps,
        "episodes": len(episodes),
        "tokens_per_step": trained_tokens,
        "step_seconds": [round(t, 2) for t in times],
        "tokens_per_s": round(trained_tokens * len(steady) / sum(steady), 1),
        "grad_norms": norms,
        "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if device == "cuda" else None,
        "gradient_checkpointing": accelerator.unwrap_model(role.model).is_gradient_checkpointing,
    }


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def check(work: Path, device: str, size: str, tiny: bool) -> dict:
    """Build, roll out, train in `work`; the summary (without the total time)."""
    from transformers import AutoConfig

    from cfbench.harness.protocol import Knobs

    os.environ["CFBENCH_CACHE"] = str(work / "cache")  # the BM25 index is built here, not in the user's cache
    os.environ["HF_HUB_OFFLINE"] = "1"
    build_model(work / "model", size)
    knobs = Knobs(max_new_tokens=24, max_obs_tokens=48, max_searches=1) if tiny else Knobs()
    dtype = "bfloat16" if device == "cuda" else "float32"
    trajectories, generation = rollouts(work / "model", device, dtype, 10 if tiny else 70, knobs)
    print(json.dumps({"generation": generation}), flush=True)  # each stage as it ends, in case a later one runs out of time
    training = train_steps(work / "model", device, trajectories, steps=3, micro_batch=5 if tiny else 10)
    print(json.dumps({"training": training}), flush=True)
    shape = AutoConfig.from_pretrained(work / "model")
    agreement = None
    if device == "cuda":
        on_gpu, _ = rollouts(work / "model", "cuda", "float32", 20, knobs)
        on_cpu, cpu_timing = rollouts(work / "model", "cpu", "float32", 20, knobs)
        pairs = list(zip(on_gpu, on_cpu))
        agreement = {
            "questions": len(pairs),
            "predictions": sum(a.prediction == b.prediction for a, b in pairs),
            "first_turns": sum(a.turns[0]["generated"] == b.turns[0]["generated"] for a, b in pairs),
            "trajectories": sum(a.turns == b.turns for a, b in pairs),
            "cpu_seconds": cpu_timing["seconds"],
        }
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "model": {"size": size, "hidden": shape.hidden_size, "layers": shape.num_hidden_layers, "vocab": shape.vocab_size, "dtype": dtype},
        "knobs": asdict(knobs),
        "generation": generation,
        "training": training,
        "cuda_vs_cpu_float32": agreement,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="A tiny model, 10 questions, short generations: the CPU test of the code path.")
    parser.add_argument("--build-model", type=Path, metavar="DIR", help="Only build the random model + tokenizer into DIR.")
    args = parser.parse_args()
    size = "tiny" if args.tiny else "small"
    if args.build_model:
        build_model(args.build_model, size)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: no CUDA device visible to torch; run with --device cpu --tiny to check the code path on a CPU")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="cfbench-gpu-check-") as tmp:
        summary = check(Path(tmp), args.device, size, args.tiny)
    summary["total_seconds"] = round(time.time() - started, 1)
    text = json.dumps(summary, indent=2)
    print("=" * 30 + " cfbench gpu check " + "=" * 30 + "\n" + text + "\n" + "=" * 79)
    if os.environ.get("OUT"):
        from cfbench.harness.runrecord import write_atomic

        Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(os.environ["OUT"]) / "gpu_check.json", text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
