"""A role's rollouts on verl, as cfbench's loop asks for them (selfevolve/loop.py, Loop.sample -> `spread`).

Loop passes each role's engine around and calls spread(asked, engine, retriever, knobs, user_prompts) for the
role's rollouts. Here the engine is a `RoleEngine` (which role samples) and `RoleSampling` is the spread: it wakes
that role's vLLM replicas and pushes the role's current weights into them (verl's CheckpointEngineManager
.update_weights), sends the questions to the role's agent-loop workers (protocol v1, agent_loop.py), puts the
replicas back to sleep and rebuilds every trajectory from the agent loop's output. One role's replicas are awake
at a time, and only while they sample. The agent-loop workers retrieve with the run config's retriever, so the
`retriever` argument is not used; the loop's `ready` hook has nothing to do (the push happens here).

A row's extra_info carries the question, its golden answers, the user prompt (the role's: the proposer's source,
MSV's source-aware prompt) and the call's `max_searches` (the proposer's is its task's hop count less one). A
call is sent padded to a multiple of the agent-loop workers (verl splits it evenly among them) with verl's
`pad_dataproto_to_divisor`; the repeated rows' trajectories are dropped. Imports verl.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto

from cfbench.harness import protocol
from cfbench.harness.agent import Trajectory
from cfbench.harness.backends import Completion
from cfbench.harness.protocol import Knobs
from cfbench.harness.suite import Question
from cfbench.training.verl_engine.recipe import AGENT_LOOP
from cfbench.training.verl_engine.roles import VerlRole


@dataclass(frozen=True)
class RoleEngine:
    """A role's engine as cfbench's loop passes it around: the role whose replicas sample."""

    role: str


class RoleSampling:
    """Loop's `spread` on verl (module docstring); `step` is passed to verl's weight push (its logs' global step)."""

    def __init__(self, roles: dict[str, VerlRole], knobs: Knobs) -> None:
        self.roles, self.knobs, self.step = roles, knobs, 0

    def __call__(
        self, asked: list[Question], engine: RoleEngine, retriever, knobs: Knobs, user_prompts: list[str] | None = None
    ) -> list[Trajectory]:
        if replace(knobs, max_searches=self.knobs.max_searches) != self.knobs:
            raise ValueError(f"the agent loop samples with the run's knobs, but for max_searches; asked for {knobs}")
        if not asked:
            return []
        role = self.roles[engine.role]
        workers = role.config.actor_rollout_ref.rollout.agent.num_workers
        batch, padded = pad_dataproto_to_divisor(request_batch(asked, knobs, user_prompts), workers)
        role.checkpoints.update_weights(self.step)  # wakes the role's replicas with its current weights
        try:
            out = role.agent_loops.generate_sequences(batch)
        finally:
            role.checkpoints.sleep_replicas()
        return trajectories(asked, unpad_dataproto(out, padded).non_tensor_batch)


def object_array(values: list) -> np.ndarray:
    """A 1-d object array of `values` (numpy would turn a list of lists into a 2-d one)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def request_batch(asked: list[Question], knobs: Knobs, user_prompts: list[str] | None = None) -> DataProto:
    """The rows verl's AgentLoopManager.generate_sequences takes, one per question, for agent_loop.py's loop."""
    users = user_prompts if user_prompts is not None else [protocol.user_prompt(q.question) for q in asked]
    info = [
        {"id": q.id, "question": q.question, "golden_answers": list(q.golden_answers), "user": u, "max_searches": knobs.max_searches}
        for q, u in zip(asked, users, strict=True)
    ]
    return DataProto.from_dict(
        non_tensors={
            "raw_prompt": object_array([[{"role": "user", "content": u}] for u in users]),
            "agent_name": object_array([AGENT_LOOP] * len(asked)),
            "extra_info": object_array(info),
            "index": np.arange(len(asked)),
        }
    )


def trajectories(asked: list[Question], fields: dict[str, np.ndarray]) -> list[Trajectory]:
    """The trajectories the agent loop ran for `asked`, rebuilt from its output's extra fields (agent_loop.py)."""
    out = []
    for i, q in enumerate(asked):
        if fields["extra_info"][i]["id"] != q.id:
            raise ValueError(f"row {i} of the agent loop's output answers {fields['extra_info'][i]['id']!r}, not {q.id!r}")
        prompt, turns = fields["prompt"][i], list(fields["turns"][i])
        completions = [Completion(**{**c, "ids": tuple(c["ids"]), "logprobs": tuple(c["logprobs"])}) for c in fields["completions"][i]]
        context = prompt + "".join(t["generated"] + t.get("observation", "") for t in turns)
        out.append(Trajectory(q, prompt, context, turns, completions, done=True))
    return out
