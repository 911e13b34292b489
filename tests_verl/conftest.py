"""Tests that need verl installed (`pip install 'cfbench[verl]'` in its own venv, docs/training-at-scale.md):
run with that venv's `python -m pytest tests_verl`. The main suite (tests/) never imports verl.

The main suite's fixtures (the bundled corpus's BM25, the tiny random Llama) are loaded from tests/conftest.py;
`in_process_rollout` is cfbench's own rollout (the hf engine), run in cfbench's venv and read back here.
"""

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from cfbench.harness.agent import Trajectory
from cfbench.harness.backends import Completion
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.protocol import Knobs
from cfbench.harness.suite import Question
from cfbench.training.config.schema import to_json
from cfbench.training.treatments import load_config

_spec = importlib.util.spec_from_file_location("cfbench_main_fixtures", Path(__file__).parents[1] / "tests" / "conftest.py")
_main = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_main)
bundled_corpus, bm25, tiny_llama = _main.bundled_corpus, _main.bm25, _main.tiny_llama

KNOBS = Knobs(max_new_tokens=48, max_searches=2)
ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="session")
def in_process_rollout(tmp_path_factory):
    """cfbench's in-process rollout, run in cfbench's own environment (in_process_rollout.py), read back as Trajectories:
    (tokens, the search-r1 paper config at KNOBS, that config's file, trajectories)."""
    here = tmp_path_factory.mktemp("verl-run")
    python = os.environ.get("CFBENCH_MAIN_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    script = [str(here / "rollout.json"), str(KNOBS.max_new_tokens), str(KNOBS.max_searches), "11", "8"]
    subprocess.run(
        [python, str(Path(__file__).parent / "in_process_rollout.py"), *script], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    trajectories = []
    for row in json.loads((here / "rollout.json").read_text()):
        q = row["question"]
        t = Trajectory(Question(q["id"], q["benchmark"], q["question"], tuple(q["golden_answers"])), row["prompt"], row["prompt"])
        t.turns = row["turns"]
        t.completions = [Completion(**{**c, "ids": tuple(c["ids"]), "logprobs": tuple(c["logprobs"])}) for c in row["completions"]]
        trajectories.append(t)
    config = load_config("search-r1", "paper") | {"knobs": KNOBS.as_dict()}
    (here / "config.json").write_text(json.dumps(to_json(config)))
    return PromptTokens.load("smollm2-135m-search"), config, here / "config.json", trajectories
