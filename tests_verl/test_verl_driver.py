"""The self-evolution driver on verl (training/verl_engine/driver.py): the calls it makes per step, and save / resume.

Every role's verl pieces (its worker group, agent-loop manager and checkpoint-engine manager) are one recording object
per role: this test is about the order of the calls cfbench's loop makes through sampling.py and role_update.py, not
about what verl does in them (that needs GPUs: docs/training-at-scale.md). The recorder answers the agent-loop calls
with scripted trajectories, as agent_loop.py returns them (prompt, turns, completions): the proposer searches its
task's hop count less one times and proposes; MSV's answers agree; a solver's 5 answers match the label 3 times.
Everything else is real: cfbench's Loop (proposals, admission, CrossFit's routing, the updates' order), the
DataProto builder, verl's compute_advantage and its padding conversions around compute_log_prob and update_actor.
"""

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from verl import DataProto
from verl.utils import tensordict_utils as tu

from cfbench.harness.backends import Completion
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.training.treatments import load_config
from cfbench.training.verl_engine.driver import evolve
from cfbench.training.verl_engine.launch import compose
from cfbench.training.verl_engine.recipe import verl_configs
from cfbench.training.verl_engine.roles import VerlRole
from cfbench.training.verl_engine.sampling import object_array

GPUS = 2
SAMPLING = ("push", "generate", "sleep")


class Recorder:
    """One role's verl worker group, agent-loop manager and checkpoint-engine manager, recording every call in `log`."""

    def __init__(self, role: str, log: list, tokens: PromptTokens) -> None:
        self.role, self.log, self.tokens, self.updates = role, log, tokens, []

    # CheckpointEngineManager
    def update_weights(self, global_steps=None):
        self.log.append(("push", self.role))

    def sleep_replicas(self):
        self.log.append(("sleep", self.role))

    # AgentLoopManager
    def generate_sequences(self, batch: DataProto) -> DataProto:
        self.log.append(("generate", self.role))
        infos = batch.non_tensor_batch["extra_info"]
        rows = [self.trajectory(info) for info in infos]
        fields = {key: object_array([row[key] for row in rows]) for key in ("prompt", "turns", "completions")}
        return DataProto.from_dict(non_tensors={**fields, "extra_info": infos})

    def trajectory(self, info: dict) -> dict:
        if info["question"] == "":  # the proposer: its budget is its hop count less one
            texts = ["<search> the source </search>"] * info["max_searches"]
            texts.append(f"<question> Which passage is {info['id']}? </question> <answer> Alpha </answer>")
        else:  # MSV's answers agree; a solver's j-th answer matches the label for even j
            texts = ["<answer> Beta </answer>" if info["id"].rsplit("#", 1)[-1] in ("1", "3") else "<answer> Alpha </answer>"]
        found = {"action": "search", "query": "the source", "observation": "\n<information></information>\n"}
        turns = [
            {
                "generated": t,
                "doc_ids": [],
                "doc_scores": [],
                **(found if t.startswith("<search>") else {"action": "answer", "query": None}),
            }
            for t in texts
        ]
        completions = [
            asdict(Completion(t, len(ids), "stop", None, tuple(ids), tuple([-0.5] * len(ids))))
            for t, ids in ((t, self.tokens.text_ids(t)) for t in texts)
        ]
        return {"prompt": self.tokens.chat_prompt(info["user"]), "turns": turns, "completions": completions}

    # RayWorkerGroup of RoleWorker
    def compute_log_prob(self, data):
        self.log.append(("log_prob", self.role))
        ids = data["input_ids"]
        zeros = torch.nested.nested_tensor_from_jagged(torch.zeros(ids.values().shape), offsets=ids.offsets())
        return tu.get_tensordict({"log_probs": zeros}, non_tensor_dict={"metrics": {}})

    def update_actor(self, data):
        self.log.append(("update", self.role))
        self.updates.append(data)
        return tu.get_tensordict({}, non_tensor_dict={"metrics": {"loss": [0.25], "grad_norm": [1.5]}})

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        self.log.append(("save", self.role, Path(local_path).name, global_step))
        Path(local_path).mkdir(parents=True)
        (Path(local_path) / "model.pt").write_text(str(global_step))

    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        self.log.append(("load", self.role, str(Path(local_path).relative_to(Path(local_path).parents[1]))))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    config = load_config("crossfit", "cpu-smoke", 2, 1) | {"prompts_per_step": 2, "rounds": 1, "proposer_steps": 1, "solver_steps": 1}
    out = tmp_path_factory.mktemp("driver") / "run"
    configs = {role: compose(tree) for role, tree in verl_configs(config, out, GPUS).items()}
    return config, out, configs, PromptTokens.load(config.model)


def roles_of(configs, log, tokens) -> dict[str, VerlRole]:
    recorders = {name: Recorder(name, log, tokens) for name in configs}
    return {name: VerlRole(name, cfg, recorders[name], recorders[name], recorders[name]) for name, cfg in configs.items()}


def steps_of(log: list) -> list[list]:
    """The log cut after each step's last save (save_every 1)."""
    ends = [i + 1 for i, entry in enumerate(log) if entry[:2] == ("save", "aux-1")]
    return [log[a:b] for a, b in zip([0, *ends], ends)]


def test_each_step_samples_one_role_at_a_time_then_updates_in_the_loops_order(setup):
    config, out, configs, tokens = setup
    out.mkdir(parents=True)
    log, rows = [], []
    roles = roles_of(configs, log, tokens)
    last = evolve(config, out, roles, 0, False, GPUS, rows.append)
    assert last == out / "checkpoint-2" and [r["step"] for r in rows] == [1, 2]

    sampling = [e for e in log if e[0] in SAMPLING]
    triples = [sampling[i : i + 3] for i in range(0, len(sampling), 3)]
    assert len(sampling) == 3 * len(triples) and triples
    for triple in triples:  # wake with the role's weights, generate, sleep: never two roles awake
        assert [e[0] for e in triple] == list(SAMPLING) and len({e[1] for e in triple}) == 1

    first, second = steps_of(log)
    sampled = lambda entries: [e[1] for e in entries if e[0] == "push"]  # noqa: E731
    updated = lambda entries: [e[1] for e in entries if e[0] == "update"]  # noqa: E731
    # step 1 (the proposer's phase): the proposer samples each hop group, the other fold's auxiliary solver scores
    # (CrossFit), only the proposer updates, after its log-probs
    assert sampled(first)[0] == "proposer" and set(sampled(first)) <= {"proposer", "aux-0", "aux-1"} and "main" not in sampled(first)
    assert updated(first) == ["proposer"] and [e[0] for e in first if e[0] in ("log_prob", "update")] == ["log_prob", "update"]
    # step 2 (the solvers' phase): main then each auxiliary that trains this step, in the loop's order, the main
    # solver sampling its own answers (it scores nothing under CrossFit) before its update
    assert updated(second)[0] == "main" and updated(second) == [r for r in ("main", "aux-0", "aux-1") if r in updated(second)]
    first_update = next(i for i, e in enumerate(second) if e[0] == "update")
    assert "main" in sampled(second[:first_update])
    for e in (e for e in log if e[0] == "update"):
        assert log[log.index(e) - 1] == ("log_prob", e[1])

    # what update_actor got: the whole step in one mini-batch, rows padded to the GPUs, the loss over the real episodes
    audit = [json.loads(line) for line in (out / "audit" / "step-1.jsonl").read_text().splitlines()]
    (proposer_update,) = roles["proposer"].workers.updates
    episodes = tu.get(proposer_update, "global_batch_size")
    assert episodes == len(audit) == config.prompts_per_step
    rows_sent = proposer_update["input_ids"].offsets().numel() - 1
    assert tu.get(proposer_update, "mini_batch_size") == rows_sent and rows_sent % GPUS == 0 and rows_sent >= episodes
    main_update = roles["main"].workers.updates[0]
    admitted = [r for r in (json.loads(x) for x in (out / "audit" / "step-2.jsonl").read_text().splitlines()) if r["admitted"]]
    assert tu.get(main_update, "global_batch_size") == config.samples_per_prompt * len(admitted) > 0
    mask = main_update["response_mask"]
    mask = mask.to_padded_tensor(0) if mask.is_nested else mask
    assert mask[tu.get(main_update, "global_batch_size") :].sum() == 0  # padded rows: no loss

    # every role saved under checkpoint-N/<role>, beside the run's record
    assert [e for e in log if e[0] == "save"] == [("save", r, r, s) for s in (1, 2) for r in configs]
    for step in (1, 2):
        assert {p.name for p in (out / f"checkpoint-{step}").iterdir()} == {*configs, "cfbench_train.json"}
    assert not list(out.glob(".checkpoint-*"))


def test_a_resumed_run_loads_every_role_then_continues(setup):
    config, out, configs, tokens = setup  # the run the test above made
    log, rows = [], []
    evolve(config, out, roles_of(configs, log, tokens), 1, True, GPUS, rows.append)
    assert log[: len(configs)] == [("load", r, f"checkpoint-1/{r}") for r in configs]
    assert [r["step"] for r in rows] == [2] and not any(e[0] == "load" for e in log[len(configs) :])
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
