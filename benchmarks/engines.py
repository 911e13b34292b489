"""Generated tokens/s of the engines on the same questions: hf one at a time, hf lockstep, openai over loopback.

    python benchmarks/engines.py [--ckpt smollm2-135m] [--questions 16] [--max-new-tokens 64]

Every arm runs the identical protocol-v1 loop with BM25 over the bundled corpus. The openai arm
starts `cfbench serve-model` on a free loopback port (same checkpoint, its own process) and sends
each turn's prompts in one request, so it measures what HTTP and JSON add to in-process hf.
Prints each arm's rate, the ratios side by side, and whether the arms' trajectories agree.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import httpx

from cfbench.harness.agent import run_batch
from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.backends.openai import OpenAIBackend
from cfbench.harness.checkpoints import resolve
from cfbench.harness.protocol import Knobs
from cfbench.harness.retrievers.choose import retriever_for
from cfbench.harness.suite import load_suite


def served(ckpt: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cfbench.cli", "serve-model", "--ckpt", ckpt, "--port", str(port)], stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/v1"
    while True:
        try:
            if httpx.get(url + "/models").status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", default="smollm2-135m")
    parser.add_argument("--suite", default="mini")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="v1 uses 500; lower keeps the one-at-a-time arm short")
    args = parser.parse_args()

    hf = HFBackend.load(resolve(args.ckpt))
    retriever = retriever_for("bm25")
    suite = load_suite(args.suite)
    step = max(1, len(suite.questions) // args.questions)
    questions = list(suite.questions)[::step][: args.questions]  # spread over the benchmarks
    knobs = Knobs(max_new_tokens=args.max_new_tokens)
    proc, url = served(args.ckpt)
    try:
        remote = OpenAIBackend(url, args.ckpt, request_size=len(questions))
        arms = {
            "hf one at a time": lambda: [t for q in questions for t in run_batch([q], hf, retriever, knobs)],
            f"hf lockstep ({len(questions)})": lambda: run_batch(questions, hf, retriever, knobs),
            f"openai lockstep ({len(questions)})": lambda: run_batch(questions, remote, retriever, knobs),
        }
        results = {}
        for name, run in arms.items():
            start = time.perf_counter()
            trajectories = run()
            seconds = time.perf_counter() - start
            tokens = sum(len(hf.tokens.encode(turn["generated"])) for t in trajectories for turn in t.turns)
            results[name] = (seconds, tokens, [t.turns for t in trajectories])
    finally:
        proc.terminate()

    print(f"{len(questions)} questions, max_new_tokens={args.max_new_tokens}, model={args.ckpt}")
    print(f"{'arm':<24}{'seconds':>9}{'tokens':>8}{'tokens/s':>10}")
    for name, (seconds, tokens, _) in results.items():
        print(f"{name:<24}{seconds:>9.1f}{tokens:>8}{tokens / seconds:>10.1f}")
    (seq_s, _, seq), (lock_s, _, lock), (http_s, _, http) = results.values()
    print(f"hf lockstep / one at a time: {seq_s / lock_s:.2f}x   openai / hf lockstep time: {http_s / lock_s:.3f}x")
    print(
        f"same trajectories: lockstep vs one at a time {sum(a == b for a, b in zip(lock, seq))}/{len(lock)}, "
        f"openai vs hf lockstep {sum(a == b for a, b in zip(http, lock))}/{len(lock)}"
    )


if __name__ == "__main__":
    main()
