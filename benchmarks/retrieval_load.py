"""Small requests while a maximal one runs: does `cfbench retriever serve` keep answering?

    python benchmarks/retrieval_load.py [--small 200] [--clients 4]

Starts the server on loopback over the bundled corpus's BM25 index, then measures 200 one-query
requests (top-3) twice: alone, and while one maximal request runs (queries x topk at the server's
--max-results, top-1 each: the most search work a request may ask for). Prints the small requests'
p50/p99 latency and how many finished while the big one was still running. Bounded: every request
has a timeout and the server is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import requests

from cfbench.harness.corpus import load_corpus
from cfbench.harness.paths import TASKS_DIR
from cfbench.harness.retrieval_server import Limits
from cfbench.harness.retrievers.index import default_index


def start_server(index) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "cfbench.cli", "retriever", "serve", "--index", str(index), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if requests.get(url + "/health", timeout=1).status_code == 200:
                return server, url
        except requests.ConnectionError:
            time.sleep(0.1)
    server.terminate()
    raise SystemExit("the server did not start within a minute")


def small_requests(url: str, questions: list[str], n: int, clients: int, busy: threading.Event) -> tuple[np.ndarray, int]:
    """Latencies in ms, and how many answers came while `busy` was set."""

    def one(i: int) -> tuple[float, bool]:
        start = time.perf_counter()
        answer = requests.post(url + "/retrieve", json={"queries": [questions[i % len(questions)]], "topk": 3}, timeout=60)
        answer.raise_for_status()
        return (time.perf_counter() - start) * 1e3, busy.is_set()

    with ThreadPoolExecutor(clients) as pool:
        done = list(pool.map(one, range(n)))
    return np.array([ms for ms, _ in done]), sum(during for _, during in done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4, help="small requests in flight")
    args = parser.parse_args()
    corpus = load_corpus()
    questions = [json.loads(line)["question"] for line in (TASKS_DIR / "suites" / "fixed1325.jsonl").read_text().splitlines()]
    n_big = Limits().max_results
    big_queries = [questions[i % len(questions)] for i in range(n_big)]
    server, url = start_server(default_index(corpus, "bm25"))
    try:
        alone, _ = small_requests(url, questions, args.small, args.clients, threading.Event())
        busy, outcome = threading.Event(), {}

        def big() -> None:
            busy.set()
            start = time.perf_counter()
            answer = requests.post(url + "/retrieve", json={"queries": big_queries, "topk": 1}, timeout=600)
            outcome.update(status=answer.status_code, s=time.perf_counter() - start, mb=len(answer.content) / 1e6)
            busy.clear()

        runner = threading.Thread(target=big)
        runner.start()
        time.sleep(0.2)  # the big request is in and searching
        loaded, overlapped = small_requests(url, questions, args.small, args.clients, busy)
        runner.join()
    finally:
        server.terminate()
        server.wait()
    print(f"bundled corpus: {len(corpus.ids)} passages, BM25; {args.small} one-query requests, {args.clients} in flight")
    print(f"maximal request: {n_big} queries x top-1: HTTP {outcome['status']} in {outcome['s']:.1f} s, {outcome['mb']:.1f} MB")
    print(f"{'small requests':<48}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for label, ms in (("alone", alone), (f"beside the maximal one ({overlapped} of {args.small} during it)", loaded)):
        print(f"{label:<48}{np.percentile(ms, 50):>10.1f}{np.percentile(ms, 99):>10.1f}{ms.max():>10.1f}")


if __name__ == "__main__":
    main()
