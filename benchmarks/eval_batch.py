"""Wall time and peak RSS of `cfbench eval` at several --batch-size values, and whether their trajectories agree.

    python benchmarks/eval_batch.py [--ckpt smollm2-135m-search] [--suite mini] [--batch-size 16 --batch-size 32]

Each arm is the real CLI in its own process (2 threads, the default protocol-v1 knobs) into a fresh run
directory; its peak RSS is that process's own (os.wait4). Prints each arm's wall time and RSS, the speed
ratio to the first arm, and how many trajectories are identical to the first arm's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def arm(ckpt: str, suite: str, batch: int, out: Path) -> tuple[float, float]:
    """Seconds and peak RSS (GB) of one eval."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "cfbench.cli", "eval", "--ckpt", ckpt, "--suite", suite, "--out", str(out)]
    proc = subprocess.Popen([*command, "--batch-size", str(batch), "--threads", "2"], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"eval at --batch-size {batch} failed")
    return time.perf_counter() - started, usage.ru_maxrss / 1e6


def turns(run: Path) -> dict[str, list]:
    return {r["id"]: r["turns"] for r in map(json.loads, (run / "trajectories.jsonl").read_text().splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", default="smollm2-135m-search")
    parser.add_argument("--suite", default="mini")
    parser.add_argument("--batch-size", type=int, action="append", dest="batches")
    args = parser.parse_args()
    batches = args.batches or [16, 32]
    with tempfile.TemporaryDirectory() as tmp:
        results = [(b, *arm(args.ckpt, args.suite, b, Path(tmp) / f"b{b}"), turns(Path(tmp) / f"b{b}")) for b in batches]
    first_seconds, first_turns = results[0][1], results[0][3]
    print(f"{args.ckpt} on {args.suite}, 2 threads")
    print(f"{'batch':>6} {'wall s':>8} {'RSS GB':>7} {'speed':>6} {'identical':>10}")
    for batch, seconds, rss, trajectories in results:
        same = sum(trajectories[q] == first_turns[q] for q in first_turns)
        print(f"{batch:>6} {seconds:>8.1f} {rss:>7.2f} {first_seconds / seconds:>5.2f}x {same:>4}/{len(first_turns)}")


if __name__ == "__main__":
    main()
