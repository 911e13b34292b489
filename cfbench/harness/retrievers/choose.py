"""What `--retriever` names: an index kind over `--corpus`, an index directory, a server URL, or replay:RUN_DIR."""

from __future__ import annotations

from pathlib import Path

from cfbench.harness.corpus import load_corpus
from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import BUNDLED_CORPUS
from cfbench.harness.retrievers import Retriever
from cfbench.harness.retrievers.cache import CachedRetriever
from cfbench.harness.retrievers.index import KINDS, default_index, open_index


def retriever_for(spec: str, corpus_path: Path | None = None) -> Retriever:
    """The retriever, behind the result cache whenever its index hash is known (see cache.py for whose hash counts)."""
    if spec.startswith(("http://", "https://")):
        if corpus_path is not None:
            raise CfbenchError("--corpus does not apply to a retrieval server; the server has its own corpus")
        from cfbench.harness.retrievers.http import HTTPRetriever

        server = HTTPRetriever(spec)
        reported = server.describe()["index_sha256"]
        return CachedRetriever(server, ("server", server.url, reported)) if reported else server
    if spec.startswith("replay:"):
        from cfbench.harness.retrievers.replay import ReplayRetriever

        return ReplayRetriever(Path(spec.removeprefix("replay:")), load_corpus(corpus_path or BUNDLED_CORPUS))
    if spec in KINDS:
        corpus = load_corpus(corpus_path or BUNDLED_CORPUS)
        inner = open_index(default_index(corpus, spec), corpus)
    elif Path(spec).is_dir():
        inner = open_index(Path(spec), load_corpus(corpus_path) if corpus_path else None)
    else:
        raise CfbenchError(f"--retriever {spec!r} is none of {', '.join(KINDS)}, an index directory, an http(s) URL, or replay:RUN_DIR")
    return CachedRetriever(inner, ("index", inner.describe()["index_sha256"]))
