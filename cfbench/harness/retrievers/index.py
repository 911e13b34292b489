"""Index directories: build once, open many times, with a manifest that says what they hold.

    DIR/manifest.json   format, kind, corpus (path, sha256, n), params, build time
    DIR/bm25s/          kind bm25: the bm25s index
    DIR/embeddings.npy  kind dense: one normalised row per passage, in corpus order

The index hash covers the format, kind, corpus hash and parameters (never the build time), so
the same build on any machine has the same hash; result caches and run records key on it.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from cfbench.harness.corpus import Corpus, Passages, load_corpus
from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import atomic_dir, sha256
from cfbench.harness.paths import TASKS_DIR, cache_dir, cache_entry_lock, from_portable, portable

FORMAT = "cfbench-index-v1"
KINDS = ("bm25", "dense", "lucene")
SHIPPED = {("dense", "minilm"): TASKS_DIR / "indexes" / "bundled-minilm"}


def _params(kind: str, encoder: str, hnsw_m: int, dtype: str) -> dict:
    if kind == "bm25":
        from cfbench.harness.retrievers.bm25 import PARAMS

        return PARAMS
    if kind == "dense":
        return {"encoder": encoder, "hnsw_m": hnsw_m, "dtype": dtype}
    from cfbench.harness.retrievers.lucene import PARAMS as LUCENE

    return LUCENE


def index_hash(kind: str, corpus_sha: str, params: dict) -> str:
    return sha256(json.dumps({"format": FORMAT, "kind": kind, "corpus": corpus_sha, "params": params}, sort_keys=True).encode())


def build_index(source: Path, kind: str, out: Path, *, encoder: str = "minilm", hnsw_m: int = 0, dtype: str = "float32") -> Path:
    """Build an index of the corpus file `source` into `out` (written aside, then moved into place whole); returns out.

    A lucene build streams the file (memory does not grow with the corpus: the wiki-18 path); bm25s and the dense
    encoders need every passage at once, so those load it whole."""
    if kind not in KINDS:
        raise CfbenchError(f"unknown index kind {kind!r}; choose one of {', '.join(KINDS)}")
    if dtype not in ("float32", "float16"):
        raise CfbenchError(f"unknown embedding dtype {dtype!r}; choose float32 or float16")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CfbenchError(f"{out} exists and is not an empty directory; choose a new --out or remove it")
    params = _params(kind, encoder, hnsw_m, dtype)
    started = time.perf_counter()
    with atomic_dir(out) as tmp:
        if kind == "lucene":
            from cfbench.harness.retrievers.lucene import build_lucene

            corpus = Passages(source)
            build_lucene(corpus, tmp / "lucene")
            digest, n = corpus.sha256, corpus.n
        else:
            corpus = load_corpus(source)
            digest, n = corpus.sha256, len(corpus.ids)
            if kind == "bm25":
                from cfbench.harness.retrievers.bm25 import build_bm25

                build_bm25(corpus, tmp / "bm25s")
            else:
                from cfbench.harness.retrievers.encoders import Encoder

                embeddings = Encoder(encoder).encode(list(corpus.contents), query=False)
                np.save(tmp / "embeddings.npy", embeddings.astype(dtype))
        manifest = {
            "format": FORMAT,
            "kind": kind,
            "corpus": {"path": portable(source), "sha256": digest, "n": n},
            "params": params,
            "index_sha256": index_hash(kind, digest, params),
            "build_seconds": round(time.perf_counter() - started, 3),
            "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return out


def read_manifest(directory: Path) -> dict:
    path = directory / "manifest.json"
    if not path.is_file():
        raise CfbenchError(f"{directory} is not an index directory (no manifest.json); build one with `cfbench index build`")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise CfbenchError(f"{path}: format {manifest.get('format')!r}, this cfbench reads {FORMAT!r}; rebuild the index")
    if manifest.get("kind") not in KINDS:
        raise CfbenchError(f"{path}: unknown index kind {manifest.get('kind')!r}; choose one of {', '.join(KINDS)}")
    return manifest


def open_index(directory: Path, corpus: Corpus | None = None):
    """The retriever for an index directory; its corpus is loaded from the manifest unless given."""
    manifest = read_manifest(directory)
    if corpus is None:
        corpus = load_corpus(from_portable(manifest["corpus"]["path"]))
    if corpus.sha256 != manifest["corpus"]["sha256"]:
        raise CfbenchError(
            f"{directory}: built from corpus {manifest['corpus']['sha256'][:16]}, but {corpus.path} is {corpus.sha256[:16]}; "
            "rebuild the index for this corpus"
        )
    kind, params = manifest["kind"], manifest["params"]
    digest = index_hash(kind, corpus.sha256, params)  # computed here, so an edited manifest cannot claim another index's results
    if digest != manifest["index_sha256"]:
        raise CfbenchError(
            f"{directory / 'manifest.json'}: index_sha256 {str(manifest['index_sha256'])[:16]} is not the hash of its "
            f"kind, corpus and parameters ({digest[:16]}); rebuild the index with `cfbench index build`"
        )
    if kind == "bm25":
        from cfbench.harness.retrievers.bm25 import BM25Retriever

        return BM25Retriever(corpus, directory / "bm25s", digest)
    if kind == "dense":
        from cfbench.harness.retrievers.dense import DenseRetriever
        from cfbench.harness.retrievers.encoders import Encoder

        embeddings = np.load(directory / "embeddings.npy")
        return DenseRetriever(corpus, embeddings, Encoder(params["encoder"]), digest, params["hnsw_m"])
    from cfbench.harness.retrievers.lucene import LuceneRetriever

    return LuceneRetriever(corpus, directory / "lucene", digest)


def default_index(corpus: Corpus, kind: str, encoder: str = "minilm") -> Path:
    """The index of this kind for this corpus: the shipped one, or one built once into the cache."""
    shipped = SHIPPED.get((kind, encoder))
    if shipped is not None and (shipped / "manifest.json").is_file() and read_manifest(shipped)["corpus"]["sha256"] == corpus.sha256:
        return shipped
    params = _params(kind, encoder, 0, "float32")
    target = cache_dir("indexes") / f"{kind}-{index_hash(kind, corpus.sha256, params)[:20]}"
    with cache_entry_lock(target):
        if not (target / "manifest.json").is_file():
            shutil.rmtree(target, ignore_errors=True)
            build_index(corpus.path, kind, target, encoder=encoder)
    return target
