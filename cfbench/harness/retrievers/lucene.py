"""Pyserini's Lucene BM25 (optional extra `lucene`; needs Java 21 and pyserini)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from cfbench.harness.corpus import Corpus
from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import dumps
from cfbench.harness.paths import portable
from cfbench.harness.retrievers import Hit
from cfbench.harness.retrievers.ranking import TIE_MARGIN, top_k

PARAMS = {"k1": 0.9, "b": 0.4, "engine": "pyserini"}


def require_java21() -> None:
    java = shutil.which("java")
    if java is None:
        raise CfbenchError("the lucene index needs Java 21 and no `java` is on PATH; install a JDK 21 or use --kind bm25")
    banner = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    found = re.search(r'version "(\d+)', banner)
    major = int(found.group(1)) if found else 0
    if major < 21:
        raise CfbenchError(
            f"the lucene index needs Java 21, found Java {major or 'of unknown version'} at {java}; install a JDK 21 or use --kind bm25"
        )


def _require_pyserini() -> None:
    require_java21()
    if importlib.util.find_spec("pyserini") is None:
        raise CfbenchError("the lucene index needs pyserini: pip install 'cfbench[lucene]'")


def build_lucene(corpus: Corpus, directory: Path) -> None:
    _require_pyserini()
    with tempfile.TemporaryDirectory() as docs:
        with open(Path(docs) / "docs.jsonl", "w", encoding="utf-8") as f:
            for pid, contents in zip(corpus.ids, corpus.contents):
                f.write(dumps({"id": pid, "contents": contents}) + "\n")  # streamed: a corpus can be GBs
        cmd = [
            sys.executable,
            "-m",
            "pyserini.index.lucene",
            "--collection",
            "JsonCollection",
            "--input",
            docs,
            "--index",
            str(directory),
            "--generator",
            "DefaultLuceneDocumentGenerator",
            "--threads",
            "1",
            "--storeRaw",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise CfbenchError(f"pyserini indexing failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")


class LuceneRetriever:
    def __init__(self, corpus: Corpus, directory: Path, index_hash: str) -> None:
        _require_pyserini()
        from pyserini.search.lucene import LuceneSearcher

        self.corpus = corpus
        self.index_hash = index_hash
        self._position = {pid: i for i, pid in enumerate(corpus.ids)}
        self._searcher = LuceneSearcher(str(directory))
        self._searcher.set_bm25(PARAMS["k1"], PARAMS["b"])

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k <= 0:
            raise CfbenchError(f"top-k must be positive, got {k}")
        qids = [str(i) for i in range(len(queries))]
        found = self._searcher.batch_search(queries, qids, k=k + TIE_MARGIN, threads=1)
        results = []
        for qid in qids:
            hits = found.get(qid, [])
            scores = np.array([h.score for h in hits], dtype=np.float64)
            positions = np.array([self._position[h.docid] for h in hits], dtype=np.int64)
            results.append([Hit(self.corpus.ids[i], self.corpus.contents[i], s) for i, s in top_k(scores, positions, k)])
        return results

    def describe(self) -> dict:
        return {
            "kind": "lucene",
            "params": PARAMS,
            "corpus": portable(self.corpus.path),
            "corpus_sha256": self.corpus.sha256,
            "index_sha256": self.index_hash,
        }
