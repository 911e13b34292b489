"""Tests that need verl installed (`pip install 'cfbench[verl]'` in its own venv, docs/training-at-scale.md):
run with that venv's `python -m pytest tests_verl`. The main suite (tests/) never imports verl.

The main suite's fixtures (the bundled corpus's BM25, the tiny random Llama) are loaded from tests/conftest.py.
"""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("cfbench_main_fixtures", Path(__file__).parents[1] / "tests" / "conftest.py")
_main = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_main)
bundled_corpus, bm25, tiny_llama = _main.bundled_corpus, _main.bm25, _main.tiny_llama
