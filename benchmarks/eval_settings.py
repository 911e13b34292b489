"""Wall time, generated tokens/s and peak RSS of `cfbench eval` under several engine settings, and whether their
trajectories agree with each other and with a committed run.

    python benchmarks/eval_settings.py [--ckpt smollm2-135m-search] [--suite mini] [--questions N]
                                       [--arm 16 --arm 32 --arm 16:onednn --arm 16:torch:lockstep]
                                       [--reference leaderboards/mini/runs/14d8edc5cae1dd20]

An arm is BATCH[:LINEAR[:BATCHING]], the eval's --batch-size, --linear (torch when left out) and --batching
(the CLI's default when left out: continuous for hf). Each arm is the real CLI in its own process (2 threads, the
default protocol-v1 knobs) into a fresh run directory; its peak RSS is that process's own (os.wait4). --questions
takes the suite's first N questions (a suite file written to the temporary directory). --reference compares every
arm's trajectories byte for byte with a committed run's (its trajectories.jsonl or .jsonl.gz). Prints each arm's
wall time, tokens/s (generated tokens, counted with the model's tokenizer), RSS, the speed ratio to the first arm,
and how many trajectories are identical to the first arm's (and to the reference's).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.suite import load_suite


def arm(ckpt: str, suite: str, spec: str, out: Path) -> tuple[float, float]:
    """Seconds and peak RSS (GB) of one eval."""
    batch, _, rest = spec.partition(":")
    linear, _, batching = rest.partition(":")
    started = time.perf_counter()
    command = [sys.executable, "-m", "cfbench.cli", "eval", "--ckpt", ckpt, "--suite", suite, "--out", str(out)]
    command += ["--batch-size", batch, "--linear", linear or "torch", "--threads", "2"]
    command += ["--batching", batching] if batching else []
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"eval arm {spec} failed")
    return time.perf_counter() - started, usage.ru_maxrss / 1e6


def turns(path: Path) -> dict[str, list]:
    """Each trajectory's turns from a run directory, or from a trajectories.jsonl(.gz) file."""
    if path.is_dir():
        path = next(p for p in (path / "trajectories.jsonl", path / "trajectories.jsonl.gz") if p.exists())
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return {r["id"]: r["turns"] for r in map(json.loads, text.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", default="smollm2-135m-search")
    parser.add_argument("--suite", default="mini")
    parser.add_argument("--questions", type=int, default=None, help="only the suite's first N questions")
    parser.add_argument("--arm", action="append", dest="arms", help="BATCH[:LINEAR[:BATCHING]] (repeat) [default: 16, 32, 16:onednn]")
    parser.add_argument("--reference", type=Path, default=None, help="a committed run (directory or trajectories file)")
    args = parser.parse_args()
    arms = args.arms or ["16", "32", "16:onednn"]
    tokens = PromptTokens.load(args.ckpt)
    reference = turns(args.reference) if args.reference else None
    with tempfile.TemporaryDirectory() as tmp:
        suite = args.suite
        if args.questions:
            lines = load_suite(args.suite).path.read_text().splitlines()[: args.questions]
            suite = str(Path(tmp) / f"{load_suite(args.suite).name}-first{args.questions}.jsonl")
            Path(suite).write_text("\n".join(lines) + "\n")
        runs = {spec: Path(tmp) / f"arm{i}" for i, spec in enumerate(arms)}
        results = [(spec, *arm(args.ckpt, suite, spec, run), turns(run)) for spec, run in runs.items()]
    first_seconds, first_turns = results[0][1], results[0][3]
    print(f"{args.ckpt} on {suite if args.questions else args.suite} ({len(first_turns)} questions), 2 threads")
    print(f"{'arm':>22} {'wall s':>8} {'tokens/s':>9} {'RSS GB':>7} {'speed':>6} {'identical':>10}" + ("  reference" if reference else ""))
    for spec, seconds, rss, trajectories in results:
        generated = sum(len(tokens.text_ids(t["generated"])) for q in trajectories.values() for t in q)
        same = sum(trajectories[q] == first_turns[q] for q in first_turns)
        line = f"{spec:>22} {seconds:>8.1f} {generated / seconds:>9.1f} {rss:>7.2f} {first_seconds / seconds:>5.2f}x"
        line += f" {same:>4}/{len(first_turns)}"
        if reference:
            line += f"  {sum(trajectories[q] == reference.get(q) for q in trajectories):>4}/{len(trajectories)}"
        print(line)


if __name__ == "__main__":
    main()
