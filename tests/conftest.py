import pytest

from harness.backends.hf import HFBackend
from harness.checkpoints import resolve
from harness.corpus import load_corpus
from harness.retrievers.index import default_index, open_index


@pytest.fixture(scope="session")
def bundled_corpus():
    return load_corpus()


@pytest.fixture(scope="session")
def bm25(bundled_corpus):
    """BM25 over the bundled corpus (index cached in $CFBENCH_CACHE like any run's)."""
    return open_index(default_index(bundled_corpus, "bm25"), bundled_corpus)


@pytest.fixture(scope="session")
def smollm2() -> HFBackend:
    """The real bundled model (SmolLM2-135M-Instruct), loaded once for every test that needs it."""
    return HFBackend.load(resolve("smollm2-135m"))
