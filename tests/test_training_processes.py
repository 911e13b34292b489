"""`cfbench train` in two processes on the CPU (torchrun, gloo), as `accelerate launch` runs it on GPUs, replicated
(data-parallel) or sharded (`sharding: "fsdp"`, core/sharding.py):
- a sharded update is the single-process update on the whole batch (the paper knobs' chunked log-probs and gradient
  checkpointing included), and bf16 compute changes it only a little;
- a sharded role's optimizer state survives a checkpoint: save + resume is the uninterrupted run, bit for bit;
- a whole Search-R1 run shares each step's prompts, steps the learning-rate schedule once per update (accelerate's
  default stepped it once per process), and builds a missing cache entry (the BM25 index) once, not side by side.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cfbench.training.treatments import load_config
from processes_update import batch
from tolerances import U, assert_adamw_first_steps_agree

HERE = Path(__file__).parent
SHARDED = {"sharding": "fsdp"}


def launch(script: str, processes: int, *args: str, cache: Path | None = None) -> None:
    command = [sys.executable, str(HERE / script), *args]
    if processes > 1:
        command[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)]  # a free port
    # faulthandler: a process that aborts prints every thread's Python stack before torchrun's summary
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1", **({"CFBENCH_CACHE": str(cache)} if cache else {})}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-8000:]


def updated(model: Path, out: Path, processes: int, changes: dict, updates: int = 1, mode: str = "") -> tuple[dict, float]:
    launch("processes_update.py", processes, str(model), str(out), json.dumps(changes), str(updates), *([mode] if mode else []))
    return load_file(out / "result" / "weights.safetensors"), json.loads((out / "result" / "stats.json").read_text())["grad_norm"]


@pytest.mark.slow
def test_a_sharded_update_is_the_single_process_update(tiny_llama, tmp_path):
    start = load_file(tiny_llama / "model.safetensors")
    one, norm = updated(tiny_llama, tmp_path / "one", 1, {})
    gradients = load_file(tmp_path / "one" / "result" / "gradients.safetensors")
    assert max((one[k] - start[k]).abs().max() for k in start) > 0  # the batch moves the weights
    paper_knobs = {"logprob_chunk": 8, "gradient_checkpointing": True}
    layouts = {"replicated": {}, "replicated, paper knobs": paper_knobs, "sharded": SHARDED, "sharded, paper knobs": SHARDED | paper_knobs}
    terms = sum(len(e.ids) for e in batch())  # each weight's gradient sums one term per position of the batch (108)
    lr = load_config("search-r1", "cpu-smoke").learning_rate
    for name, changes in layouts.items():
        two, two_norm = updated(tiny_llama, tmp_path / name, 2, changes)
        # the whole batch's gradient, reduced across the processes in another order: each element may move by about
        # 2(terms-1)·u of its terms' size (tests/tolerances.py), so the norm by that much relative: 1.3e-5
        assert two_norm == pytest.approx(norm, rel=2 * (terms - 1) * U), name
        assert sorted(two) == sorted(one), name
        assert_adamw_first_steps_agree(two, one, gradients, lr, terms, name)
    bf16, bf16_norm = updated(tiny_llama, tmp_path / "bf16", 2, SHARDED | {"bf16": True})
    assert bf16_norm == pytest.approx(norm, rel=1e-3) and bf16_norm != norm  # computed in bfloat16, reduced in float32
    assert all(v.dtype == torch.float32 for v in bf16.values())  # over float32 master weights


@pytest.mark.slow
def test_a_sharded_role_resumes_with_its_optimizer_state(tiny_llama, tmp_path):
    straight, _ = updated(tiny_llama, tmp_path / "straight", 2, SHARDED, updates=2)
    updated(tiny_llama, tmp_path / "split", 2, SHARDED, updates=1, mode="save")
    checkpoint = tmp_path / "split" / "checkpoint-1"
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "state" / "sharded-optimizer-main.pt").is_file()
    resumed, _ = updated(tiny_llama, tmp_path / "split", 2, SHARDED, updates=1, mode="resume")
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)  # a fresh AdamW's second step would differ


@pytest.mark.slow
@pytest.mark.parametrize("changes", [{}, SHARDED, SHARDED | {"bf16": True}], ids=["replicated", "sharded", "sharded bf16"])
def test_two_processes_train_one_step_schedule_and_build_the_index_once(tiny_llama, tmp_path, changes):
    out, cache = tmp_path / "run", tmp_path / "cache"  # an empty cache: both processes find the index missing at once
    knobs = json.dumps({"prompts_per_step": 2, "warmup_steps": 4, **changes})
    launch("processes_train.py", 2, str(tiny_llama), str(out), knobs, cache=cache)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    lr = load_config("search-r1", "cpu-smoke").learning_rate
    assert [r["learning_rate"] for r in rows] == [lr * 1 / 4, lr * 2 / 4]  # warmup 4: one scheduler step per update
    rollouts = [json.loads(line) for line in (out / "rollouts" / "step-1.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 5 and len({r["id"].split("#")[0] for r in rollouts}) == 2  # each process rolled out its prompt
    saved = load_file(out / "checkpoint-2" / "model.safetensors")
    assert all(v.dtype == torch.float32 for v in saved.values())  # the master weights, never a bf16 sampler's
    assert (out / "checkpoint-2" / "state" / "sharded-optimizer-main.pt").is_file() == bool(changes)
    assert len(list(cache.glob("indexes/bm25-*"))) == 1


@pytest.mark.slow
def test_self_evolution_shares_rollouts_among_processes_and_sharded_roles_train_as_replicated_ones(tiny_llama, tmp_path):
    """CrossFit's 4 roles in 2 processes: each process samples half of every rollout batch, from its own stream, and
    every process updates each role on the whole step; sharded roles (sharing one sampler copy) end where replicated ones do."""
    from transformers import AutoTokenizer

    runs = {name: tmp_path / name for name in ("replicated", "sharded")}
    for name, changes in (("replicated", {}), ("sharded", SHARDED)):
        launch("processes_selfevolve.py", 2, str(tiny_llama), str(runs[name]), json.dumps(changes))

    def audit(run):
        return [json.loads(line) for step in (1, 2, 3) for line in (run / "audit" / f"step-{step}.jsonl").read_text().splitlines()]

    replicated, sharded = audit(runs["replicated"]), audit(runs["sharded"])
    assert [r["step"] for r in replicated] == [1] * 4 + [2] * 4 + [3] * 4 and any(r["admitted"] for r in replicated)
    assert all(len(r["solver_responses"]) == 5 for r in replicated if r["admitted"])
    # a task's answers alternate between the processes' shares (every other one each), so two of them are the same
    # question in the same row of the two shares: sampled with one seed, they would start with the same token
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    for r in replicated:
        firsts = [tokenizer.encode(a["turns"][0]["generated"], add_special_tokens=False)[0] for a in r["solver_responses"]]
        assert len(set(firsts)) == len(firsts), (r["task_id"], firsts)
    assert sharded == replicated  # the same proposals, admissions, scorers, responses and k
    for r in replicated[:4]:  # step 1's scripted proposals, gathered back onto their own tasks: each quotes its own source
        assert re.search(r"Which article says '(.*)'\?", r["proposer_turns"][-1]["generated"]).group(1) in r["source"]
    timing = {"rollout_s", "update_s", "cpu_s"}
    rows = {
        n: [{k: v for k, v in json.loads(x).items() if k not in timing} for x in (r / "metrics.jsonl").read_text().splitlines()]
        for n, r in runs.items()
    }
    for mine, theirs in zip(rows["sharded"], rows["replicated"], strict=True):
        assert mine["losses"] == pytest.approx(theirs["losses"], rel=1e-4)
    assert "proposer" in rows["sharded"][0]["losses"]
    assert len({r["proposer_turns"][-1]["generated"] for r in sharded if r["step"] > 1}) > 1  # sampled, not scripted
    start = load_file(tiny_llama / "model.safetensors")
    for role in ("main", "proposer", "aux-0", "aux-1"):
        one, two = (load_file(r / "checkpoint-3" / ("" if role == "main" else role) / "model.safetensors") for r in runs.values())
        assert all(torch.allclose(two[k], one[k], rtol=0, atol=1e-6) for k in one), role
        # only the proposer's rewards differ within a step (processes_selfevolve.py); it sampled steps 2 and 3 with its new
        # weights, from the sampler copy it shares with the solvers when sharded: refreshed from the wrong role, its text would differ
        assert (max((one[k] - start[k]).abs().max() for k in start) > 0) == (role == "proposer"), role
    state = runs["sharded"] / "checkpoint-3" / "state"
    assert sorted(p.name for p in state.glob("sharded-optimizer-*")) == [
        f"sharded-optimizer-{n}.pt" for n in ("aux-0", "aux-1", "main", "proposer")
    ]


def test_each_process_samples_its_share_from_its_own_stream_and_a_single_process_from_the_named_one():
    from types import SimpleNamespace

    from cfbench.training.core.learner import process_stream

    assert process_stream("aux-0", SimpleNamespace(num_processes=1, process_index=0)) == "aux-0"  # single-process runs draw as before
    assert [process_stream("aux-0", SimpleNamespace(num_processes=2, process_index=rank)) for rank in (0, 1)] == ["aux-0-0", "aux-0-1"]


def test_sharding_knobs_are_checked_in_one_line():
    from accelerate import Accelerator

    from cfbench.harness.errors import CfbenchError
    from cfbench.training.core.sharding import check_processes

    config = load_config("search-r1", "cpu-smoke")
    for changes, message in [
        ({"sharding": "zero3"}, "knob sharding must be"),
        ({"bf16": True}, "knob bf16 sets the precision of sharded roles: set sharding to 'fsdp' or remove bf16"),
        (SHARDED | {"lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj"]}}, "LoRA roles train a few MB each"),
    ]:
        with pytest.raises(CfbenchError, match=message):
            config | changes
    with pytest.raises(CfbenchError, match="shards a role across the run's processes, and this run has one"):
        check_processes(Accelerator(cpu=True))
