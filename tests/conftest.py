import pytest

from harness.corpus import load_corpus
from harness.retrievers.bm25 import BM25Retriever


@pytest.fixture(scope="session")
def bm25() -> BM25Retriever:
    """BM25 over the bundled corpus (index cached in $CFBENCH_CACHE like any run)."""
    return BM25Retriever(load_corpus())
