"""Seconds per example of the warm start's LoRA SFT at the cpu scale's settings, and the adapter's size.

    python benchmarks/warmstart_sft.py [--examples 24] [--threads 2]

Trains the cpu config (training/configs/warm-start.cpu.json) on a smaller mix with the same kinds in
the same shares, on the shipped data, into a temporary directory, and prints the Trainer's loop time
per example and per 1,000 tokens, and the adapter's size. The full recipe takes about the per-example
time x the cpu mix's examples. Run it on an otherwise idle machine: a shared CPU inflates the numbers.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from cfbench.harness.backends.tokens import PromptTokens
from cfbench.training.treatments import load_config
from cfbench.training.warmstart import encode, parse_rows, read_data, select, warm_start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config("warm-start", "cpu")
    total = sum(config.mix.counts().values())
    mix = {kind: max(1, round(n * args.examples / total)) for kind, n in config.mix.counts().items()}
    with tempfile.TemporaryDirectory() as tmp:
        adapter = warm_start(config | {"mix": mix, "save_every": 10**6}, Path(tmp) / "run", command="benchmarks/warmstart_sft.py")
        manifest = json.loads((adapter / "manifest.json").read_text())
        size = (adapter / "adapter_model.safetensors").stat().st_size
    seconds, examples = manifest["train_seconds"], manifest["examples"]
    print(
        json.dumps(
            {
                "threads": args.threads,
                "examples": examples,
                "tokens": manifest["tokens"],
                "train_seconds": seconds,
                "seconds_per_example": round(seconds / examples, 2),
                "seconds_per_1k_tokens": round(1000 * seconds / manifest["tokens"], 2),
                "cpu_recipe_examples": total,
                "cpu_recipe_tokens": (tokens := _recipe_tokens(config)),
                "cpu_recipe_minutes": round(seconds / manifest["tokens"] * tokens / 60, 1),
                "adapter_mb": round(size / 1e6, 2),
            },
            indent=2,
        )
    )


def _recipe_tokens(config) -> int:
    """The full cpu mix's tokens: the recipe's time scales with them (its kinds differ in length)."""
    data, where = read_data(config.data)
    picked = select(parse_rows(data, where), config.mix.counts(), config.seed, where)
    return sum(len(e.ids) for e in encode(picked, PromptTokens.load(config.model)))


if __name__ == "__main__":
    main()
