"""`cfbench train` in two processes on the CPU (torchrun, gloo), as `accelerate launch` runs it on GPUs: the processes
share a step's prompts, the learning-rate schedule steps once per update (accelerate's default stepped it once per
process), and the processes build a missing cache entry (the BM25 index) one after the other, not side by side."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cfbench.training.treatments import load_config

HELPER = Path(__file__).with_name("processes_train.py")


@pytest.mark.slow
def test_two_processes_train_one_step_schedule_and_build_the_index_once(tiny_llama, tmp_path):
    out, cache = tmp_path / "run", tmp_path / "cache"  # an empty cache: both processes find the index missing at once
    changes = {"prompts_per_step": 2, "warmup_steps": 4}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(HELPER), str(tiny_llama), str(out)]
    env = {**os.environ, "CFBENCH_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*command, json.dumps(changes)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    lr = load_config("search-r1", "cpu-smoke").learning_rate
    assert [r["learning_rate"] for r in rows] == [lr * 1 / 4, lr * 2 / 4]  # warmup 4: one scheduler step per update
    rollouts = [json.loads(line) for line in (out / "rollouts" / "step-1.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 5 and len({r["id"].split("#")[0] for r in rollouts}) == 2  # each process rolled out its prompt
    assert (out / "checkpoint-2" / "model.safetensors").is_file()
    assert len(list(cache.glob("indexes/bm25-*"))) == 1
