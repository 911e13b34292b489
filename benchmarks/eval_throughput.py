"""Questions/s of the lockstep agent loop vs one question at a time, same model and questions.

    python benchmarks/eval_throughput.py [--ckpt smollm2-135m] [--questions 16] [--max-new-tokens 64]

Both arms run the identical protocol-v1 loop with the real model and BM25 over the bundled corpus;
only the number of trajectories stepped together differs. Prints both rates and their ratio, and
whether the two arms produced the same predictions.
"""

from __future__ import annotations

import argparse
import time

from harness.agent import run_batch
from harness.backends.hf import HFBackend
from harness.checkpoints import resolve
from harness.protocol import Knobs
from harness.retrievers.choose import retriever_for
from harness.suite import load_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", default="smollm2-135m")
    parser.add_argument("--suite", default="mini")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="v1 uses 500; lower keeps the sequential arm short")
    args = parser.parse_args()

    backend = HFBackend(resolve(args.ckpt))
    retriever = retriever_for("bm25")  # cached results: both arms see identical passages
    suite = load_suite(args.suite)
    step = max(1, len(suite.questions) // args.questions)
    questions = list(suite.questions)[::step][: args.questions]  # spread over the benchmarks
    knobs = Knobs(max_new_tokens=args.max_new_tokens)

    start = time.perf_counter()
    lockstep = run_batch(questions, backend, retriever, knobs)
    lockstep_s = time.perf_counter() - start
    start = time.perf_counter()
    sequential = [t for q in questions for t in run_batch([q], backend, retriever, knobs)]
    sequential_s = time.perf_counter() - start

    n = len(questions)
    same = sum(a.prediction == b.prediction for a, b in zip(lockstep, sequential))
    print(f"{n} questions, max_new_tokens={args.max_new_tokens}, model={args.ckpt}")
    print(f"{'arm':<22}{'seconds':>10}{'questions/s':>14}")
    print(f"{'lockstep (batch ' + str(n) + ')':<22}{lockstep_s:>10.1f}{n / lockstep_s:>14.3f}")
    print(f"{'one at a time':<22}{sequential_s:>10.1f}{n / sequential_s:>14.3f}")
    print(f"speed-up: {sequential_s / lockstep_s:.2f}x   same predictions: {same}/{n}")


if __name__ == "__main__":
    main()
