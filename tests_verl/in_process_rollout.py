"""Run by test_verl_agent_loop.py in cfbench's own environment (its transformers; verl's venv pins an older one
that cfbench's hf engine cannot run on): cfbench's in-process rollout, written as JSON for the verl loop to match.

    python tests_verl/in_process_rollout.py OUT.json MAX_NEW_TOKENS MAX_SEARCHES SEED QUESTIONS
"""

import json
import sys
from dataclasses import asdict

from cfbench.harness.agent import run_batch
from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.checkpoints import resolve
from cfbench.harness.protocol import Knobs
from cfbench.harness.retrievers.choose import retriever_for
from cfbench.harness.suite import load_suite

out, new_tokens, searches, seed, n = sys.argv[1], *map(int, sys.argv[2:6])
base = HFBackend.load(resolve("smollm2-135m-search"))
engine = HFBackend(base.model, base.tokens, ckpt=base.ckpt, dtype="float32", temperature=1.0, seed=seed)
questions = load_suite("mini").questions[:n]
trajectories = run_batch(questions, engine, retriever_for("bm25"), Knobs(max_new_tokens=new_tokens, max_searches=searches))
rows = [
    {"question": asdict(t.question), "prompt": t.prompt, "turns": t.turns, "completions": [asdict(c) for c in t.completions]}
    for t in trajectories
]
with open(out, "w") as f:
    json.dump(rows, f)
