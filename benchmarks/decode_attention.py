"""One decoding step of the continuous engine with SDPA over the padded rows against per-row attention
(backends/row_attention.py), at the rows' context lengths of a real suite's schedule.

    python benchmarks/decode_attention.py [--run leaderboards/fixed1325/runs/ec5b8ca46e848cca] [--rows 32]
                                          [--at 1000 --at 4000 --at 7000] [--repeats 10]

The schedule is replayed from a committed run's trajectories (token counts with the model's tokenizer): `--rows`
contexts decode one token a step, a turn's observation is appended when it ends and a finished trajectory's row
goes to the next question, as `HFBackend.stream` does. At each `--at` step the rows' context lengths are placed in a
Slots cache (random K/V: the time does not depend on the values) and one decoding step of the real model is timed
both ways, the two taking turns. Prints the padded width against the rows' mean (the K/V the padded step reads for
nothing), each way's median milliseconds, and their ratio; then the K/V read over the whole schedule both ways.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from pathlib import Path

import torch

from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.backends.kv import Slots
from cfbench.harness.checkpoints import resolve
from cfbench.harness.protocol import user_prompt


def trajectories(run: Path, tokens) -> list[tuple[int, list[tuple[int, int]]]]:
    """Per question: its prompt's tokens and, per turn, (generated tokens, observation tokens)."""
    out = []
    for row in map(json.loads, gzip.open(run / "trajectories.jsonl.gz", "rt")):
        turns = [
            (max(1, len(tokens.text_ids(t["generated"]))), len(tokens.text_ids(t["observation"])) if t.get("observation") else 0)
            for t in row["turns"]
        ]
        out.append((len(tokens.encode(tokens.chat_prompt(user_prompt(row["question"])))), turns))
    return out


def schedule(questions, rows: int, at: set[int]) -> tuple[dict[int, list[int]], int, int]:
    """The rows' context lengths at the steps in `at`, and the positions read over all steps: rows' own, and padded."""
    pending, live, snapshots, own, padded, step = iter(questions), [], {}, 0, 0, 0
    for q in pending:
        live.append([q[0], q[1], 0, 0])  # context, turns, turn, generated in this turn
        if len(live) == rows:
            break
    while live:
        step += 1
        lengths = [x[0] for x in live]
        own, padded = own + sum(lengths), padded + len(lengths) * max(lengths)
        if step in at:
            snapshots[step] = lengths
        kept = []
        for x in live:
            x[0], x[3] = x[0] + 1, x[3] + 1
            generated, observation = x[1][x[2]]
            if x[3] < generated:
                kept.append(x)
            elif x[2] + 1 < len(x[1]):
                x[0], x[2], x[3] = x[0] + observation, x[2] + 1, 0
                kept.append(x)
            elif (q := next(pending, None)) is not None:
                kept.append([q[0], q[1], 0, 0])
        live = kept
    return snapshots, own, padded


@torch.inference_mode()
def step_ms(engine: HFBackend, lengths: list[int], repeats: int) -> tuple[float, float]:
    """Median ms of one decoding step over these rows with padded SDPA and with per-row attention, taking turns."""
    config = engine.model.config
    heads, dim = config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    slots = Slots(len(lengths))
    for row, n in enumerate(lengths):
        slots.place(row, [(torch.randn(1, heads, n, dim), torch.randn(1, heads, n, dim)) for _ in range(config.num_hidden_layers)])
    mask, positions, starts = slots.step("cpu")  # not advanced: each repeat writes the same column
    ids = torch.randint(0, config.vocab_size, (len(lengths), 1))
    times = {"padded": [], "rows": []}
    for _ in range(repeats + 1):
        for way, extra in (("padded", {}), ("rows", {"row_starts": starts})):
            began = time.perf_counter()
            engine.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, cache=slots.cache, use_cache=True, logits_to_keep=1, **extra
            )
            times[way].append(time.perf_counter() - began)
    return statistics.median(times["padded"][1:]) * 1e3, statistics.median(times["rows"][1:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", type=Path, default=Path("leaderboards/fixed1325/runs/ec5b8ca46e848cca"))
    parser.add_argument("--ckpt", default="smollm2-135m-search")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--at", type=int, action="append", help="steps of the schedule to time [default: 1000, 4000, 7000]")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    engine = HFBackend.load(resolve(args.ckpt), threads=args.threads)
    snapshots, own, padded = schedule(trajectories(args.run, engine.tokens), args.rows, set(args.at or [1000, 4000, 7000]))
    print(f"{args.run}, {args.ckpt}, {args.rows} rows, {args.threads} threads; one decoding step, median of {args.repeats}")
    print(f"{'step':>6}{'rows':>6}{'mean ctx':>10}{'widest':>8}{'padded ms':>11}{'per-row ms':>12}{'speed':>8}")
    for step, lengths in sorted(snapshots.items()):
        slow, fast = step_ms(engine, lengths, args.repeats)
        print(f"{step:>6}{len(lengths):>6}{statistics.mean(lengths):>10.0f}{max(lengths):>8}{slow:>11.0f}{fast:>12.0f}{slow / fast:>7.2f}x")
    print(f"K/V positions read over the schedule: padded {padded / own:.2f}x the rows' own")


if __name__ == "__main__":
    main()
