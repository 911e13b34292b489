"""The least time a suite's evaluation can take on this machine in float32: the work its committed trajectories
hold, priced at the rates this CPU reaches for the engine's own operations.

    python benchmarks/engine_floor.py [--run leaderboards/fixed1325/runs/ec5b8ca46e848cca] [--ckpt smollm2-135m-search]
                                      [--threads 2]

Work, counted with the model's tokenizer from the run's trajectories: prefill tokens (every question and every
observation; the instruction prefix is computed once), generated tokens, and the context each generated token
attends over. Rates, measured here with torch at --threads: matrix products at 512 rows (a prefill) and at 32 rows
(a decoding step) of the model's own shapes, the output head at 32 rows, and the K/V read rate of a decoding
step's attention (scaled_dot_product_attention over 32 rows of 1,000 cached positions). Prints each part's cost
and their sum: no engine that keeps the model's float32 arithmetic can go below it (padding, drains and Python
come on top).
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import torch
from transformers import AutoConfig

from cfbench.harness.agent import shared_prefix
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.checkpoints import resolve
from cfbench.harness.protocol import user_prompt


def rate(fn, work: float, repeats: int = 20) -> float:
    """work per second of fn, best of `repeats` after a warm-up."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return work / best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", type=Path, default=Path("leaderboards/fixed1325/runs/ec5b8ca46e848cca"))
    parser.add_argument("--ckpt", default="smollm2-135m-search")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokens = PromptTokens.load(args.ckpt)
    config = AutoConfig.from_pretrained(resolve(args.ckpt).location)
    h, inter, layers, vocab = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    head_dim, kv_heads = h // config.num_attention_heads, config.num_key_value_heads
    body = layers * (2 * h * h + 2 * h * kv_heads * head_dim + 3 * h * inter)  # q, o, k, v and the MLP's three
    kv_bytes = layers * 2 * kv_heads * head_dim * 4  # float32 K and V of one position

    rows = [json.loads(line) for line in gzip.open(args.run / "trajectories.jsonl.gz", "rt")]
    shared = len(tokens.encode(shared_prefix(tokens)))  # PromptTokens has the chat_prompt shared_prefix reads
    prefill = generated = context_sum = 0
    for row in rows:
        context = len(tokens.encode(tokens.chat_prompt(user_prompt(row["question"]))))
        prefill += context - shared  # the shared instruction prefix is computed once per run
        for turn in row["turns"]:
            g = len(tokens.text_ids(turn["generated"]))
            context_sum += g * context + g * (g - 1) // 2
            generated += g
            context += g
            if turn.get("observation"):
                o = len(tokens.text_ids(turn["observation"]))
                prefill += o
                context += o
    mean_context = context_sum / generated

    def matmul(m: int, n: int, k: int):
        a, b = torch.randn(m, k), torch.randn(k, n)
        return lambda: a @ b, 2 * m * n * k

    prefill_rate = rate(*matmul(512, inter, h))
    decode_rate = rate(*matmul(32, inter, h))
    head_rate = rate(*matmul(32, vocab, h))
    q = torch.randn(32, kv_heads, config.num_attention_heads // kv_heads, head_dim)
    k, v = torch.randn(32, kv_heads, 1000, head_dim), torch.randn(32, kv_heads, 1000, head_dim)
    read_rate = rate(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), 32 * 1000 * kv_bytes / layers)

    parts = [
        ("prefill", prefill, 2 * body, f"{prefill_rate / 1e9:.0f} GFLOPS (512 rows)", prefill * 2 * body / prefill_rate),
        ("decode, body", generated, 2 * body, f"{decode_rate / 1e9:.0f} GFLOPS (32 rows)", generated * 2 * body / decode_rate),
        ("decode, head", generated, 2 * h * vocab, f"{head_rate / 1e9:.0f} GFLOPS (32 rows)", generated * 2 * h * vocab / head_rate),
        (
            "decode attention",
            generated,
            mean_context * kv_bytes,
            f"{read_rate / 1e9:.1f} GB/s of K/V",
            generated * mean_context * kv_bytes / read_rate,
        ),
    ]
    print(f"{args.run} ({len(rows)} questions), {args.ckpt}, {args.threads} threads")
    print(f"generated tokens attend over {mean_context:,.0f} positions on average; K/V {kv_bytes / 1e3:.0f} KB a position")
    print(f"{'part':<18}{'tokens':>10}{'per token':>16}{'rate':>28}{'seconds':>10}")
    for name, n, per, shown, seconds in parts:
        unit = f"{per / 1e6:,.0f} MB" if name == "decode attention" else f"{per / 1e6:,.0f} MFLOP"
        print(f"{name:<18}{n:>10,}{unit:>16}{shown:>28}{seconds:>10,.0f}")
    total = sum(p[-1] for p in parts)
    print(f"floor: {total:,.0f} s ({total / 60:.0f} minutes)")


if __name__ == "__main__":
    main()
