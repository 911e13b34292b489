"""Wall time and peak RSS of `cfbench eval` under several engine settings, and whether their trajectories agree.

    python benchmarks/eval_settings.py [--ckpt smollm2-135m-search] [--suite mini] [--arm 16 --arm 32 --arm 16:onednn]

An arm is BATCH or BATCH:LINEAR, the eval's --batch-size and --linear (torch when left out).
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


def arm(ckpt: str, suite: str, spec: str, out: Path) -> tuple[float, float]:
    """Seconds and peak RSS (GB) of one eval."""
    batch, _, linear = spec.partition(":")
    started = time.perf_counter()
    command = [sys.executable, "-m", "cfbench.cli", "eval", "--ckpt", ckpt, "--suite", suite, "--out", str(out)]
    command += ["--batch-size", batch, "--linear", linear or "torch", "--threads", "2"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"eval arm {spec} failed")
    return time.perf_counter() - started, usage.ru_maxrss / 1e6


def turns(run: Path) -> dict[str, list]:
    return {r["id"]: r["turns"] for r in map(json.loads, (run / "trajectories.jsonl").read_text().splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", default="smollm2-135m-search")
    parser.add_argument("--suite", default="mini")
    parser.add_argument("--arm", action="append", dest="arms", help="BATCH or BATCH:LINEAR (repeat) [default: 16, 32, 16:onednn]")
    args = parser.parse_args()
    arms = args.arms or ["16", "32", "16:onednn"]
    with tempfile.TemporaryDirectory() as tmp:
        runs = {spec: Path(tmp) / f"arm{i}" for i, spec in enumerate(arms)}
        results = [(spec, *arm(args.ckpt, args.suite, spec, run), turns(run)) for spec, run in runs.items()]
    first_seconds, first_turns = results[0][1], results[0][3]
    print(f"{args.ckpt} on {args.suite}, 2 threads")
    print(f"{'arm':>10} {'wall s':>8} {'RSS GB':>7} {'speed':>6} {'identical':>10}")
    for spec, seconds, rss, trajectories in results:
        same = sum(trajectories[q] == first_turns[q] for q in first_turns)
        print(f"{spec:>10} {seconds:>8.1f} {rss:>7.2f} {first_seconds / seconds:>5.2f}x {same:>4}/{len(first_turns)}")


if __name__ == "__main__":
    main()
