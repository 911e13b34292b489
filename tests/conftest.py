import os

import pytest
import torch

from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.checkpoints import resolve
from cfbench.harness.corpus import load_corpus
from cfbench.harness.retrievers.index import default_index, open_index


def pytest_configure(config):
    # `-m "not slow"` leaves out the tests that train models or drive Chromium
    config.addinivalue_line("markers", "slow: trains a model or drives headless Chromium (minutes)")


def pytest_collection_modifyitems(config, items):
    """The `sources` tests (the full rebuild from the original sources) run only when CFBENCH_SOURCES names them;
    without it they are deselected, as `-m` deselects, not collected and skipped: a checkout has no such folder."""
    if os.environ.get("CFBENCH_SOURCES"):
        return
    deselected = [item for item in items if item.get_closest_marker("sources")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("sources")]


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


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """A randomly initialised 2-layer Llama (3.2M parameters) with SmolLM2's tokenizer and chat template.

    For tests about what a training run routes, records and resumes rather than what its model
    knows: every role's checkpoint is megabytes, where SmolLM2-135M's is 1.6 GB with its optimizer.
    """
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    base = resolve("smollm2-135m").location
    config = AutoConfig.from_pretrained(base)
    config.update(
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
        }
    )
    out = tmp_path_factory.mktemp("tiny-llama")
    with torch.random.fork_rng():  # seeded weights without reseeding what later tests draw
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out
