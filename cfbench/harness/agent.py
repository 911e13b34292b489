"""The protocol-v1 agent loop: run_batch steps every active trajectory of a batch in lockstep, run_stream by
continuous batching; both advance a trajectory with the same per-trajectory turn (take_turn, observe), which the
verl agent loop (training/verl_engine/agent_loop.py) also steps with.

In lockstep each turn makes one batched generate call for all active trajectories and one batched retrieval
for all their searches. A trajectory ends at its first answer; after `max_searches` search or
invalid turns it gets one last generation in which a search is not executed.

The same loop scores evaluation (greedy) and rolls out training (sampled): each trajectory keeps its
turns' Completions, so an update trains on the sampled token ids, not on a re-encoding of the text.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from cfbench.harness import protocol
from cfbench.harness.backends import Backend, Completion
from cfbench.harness.protocol import Knobs
from cfbench.harness.retrievers import Hit, Retriever
from cfbench.harness.suite import Question


@dataclass
class Trajectory:
    question: Question
    prompt: str  # the chat prompt it started from
    context: str  # the prompt and everything since
    turns: list[dict] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)  # each turn's, as the engine returned it (not written to records)
    done: bool = False

    @property
    def prediction(self) -> str:
        return protocol.final_answer([t["generated"] for t in self.turns])


def run_batch(
    questions: list[Question],
    backend: Backend,
    retriever: Retriever,
    knobs: Knobs,
    on_searches: Callable[[int], None] = lambda n: None,
    user_prompts: list[str] | None = None,
) -> list[Trajectory]:
    """`user_prompts` replaces the protocol's prompt (training roles that read a source passage)."""
    users = user_prompts if user_prompts is not None else [protocol.user_prompt(q.question) for q in questions]
    trajs = [Trajectory(q, p, p) for q, p in zip(questions, map(backend.chat_prompt, users), strict=True)]
    for _ in range(knobs.max_searches + 1):
        active = [t for t in trajs if not t.done]
        if not active:
            break
        generated = backend.generate([t.context for t in active], knobs.max_new_tokens, knobs.max_context_tokens, protocol.STOP)
        searching = [traj for traj, completion in zip(active, generated, strict=True) if take_turn(traj, completion, knobs)]
        search(searching, backend, retriever, knobs)
        if searching:
            on_searches(len(searching))
    return trajs


def run_stream(
    questions: list[Question],
    engine,
    retriever: Retriever,
    knobs: Knobs,
    rows: int,
    on_searches: Callable[[int], None] = lambda n: None,
    on_trajectory: Callable[[int, Trajectory], None] = lambda i, t: None,
) -> list[Trajectory]:
    """The same trajectories as run_batch, decoded by continuous batching (an engine with `stream`, e.g. hf): up to
    `rows` trajectories generate at once, each continuing as soon as its own turn (and search) is done, and a
    finished trajectory's row goes to the next question. `on_trajectory(i, t)` reports each as it finishes."""
    trajs = [Trajectory(q, p, p) for q, p in ((q, engine.chat_prompt(protocol.user_prompt(q.question))) for q in questions)]

    def step(ended: list[tuple[int, Completion]]) -> list[tuple[int, str]]:
        searching = [trajs[i] for i, completion in ended if take_turn(trajs[i], completion, knobs)]
        search(searching, engine, retriever, knobs)
        if searching:
            on_searches(len(searching))
        for i, _ in ended:
            if trajs[i].done:
                on_trajectory(i, trajs[i])
        return [(i, trajs[i].context) for i, _ in ended if not trajs[i].done]

    fresh = ((i, t.context) for i, t in enumerate(trajs))
    engine.stream(fresh, step, rows, knobs.max_new_tokens, knobs.max_context_tokens, protocol.STOP, prefix=shared_prefix(engine))
    return trajs


def shared_prefix(backend: Backend) -> str:
    """The text every protocol prompt starts with: the chat template's opening and the instruction up to the question."""
    return os.path.commonprefix([backend.chat_prompt(protocol.user_prompt(q)) for q in ("a", "b")])


def take_turn(traj: Trajectory, completion: Completion, knobs: Knobs) -> bool:
    """Advance one trajectory by the turn it just generated: record the turn, then end the trajectory (an answer,
    or its last turn) or append the invalid-action observation. True when the turn's search is to run (`search`)."""
    last_turn = len(traj.turns) == knobs.max_searches
    text = completion.text
    action, content = protocol.parse_action(text)
    record = {"generated": text, "action": action, "query": content if action == "search" else None, "doc_ids": [], "doc_scores": []}
    traj.turns.append(record)
    traj.completions.append(completion)
    traj.context += text
    if action == "answer" or last_turn:
        if action == "search":
            record["action"] = "search_over_budget"
        traj.done = True
        return False
    if action == "search":
        return True
    record["observation"] = protocol.INVALID_ACTION
    traj.context += protocol.INVALID_ACTION
    return False


def search(trajs: list[Trajectory], backend: Backend, retriever: Retriever, knobs: Knobs) -> None:
    """Run the last turn's search of each trajectory (one batched retrieval) and append each observation."""
    if not trajs:
        return
    results = retriever.search([t.turns[-1]["query"] for t in trajs], knobs.topk)
    for traj, hits in zip(trajs, results, strict=True):
        observe(traj, hits, backend, knobs)


def observe(traj: Trajectory, hits: list[Hit], engine: Backend, knobs: Knobs) -> None:
    """The trajectory's last turn, a search, gets its passages, cut to max_obs_tokens of the engine's tokenizer."""
    record = traj.turns[-1]
    obs = engine.truncate(protocol.observation(hits), knobs.max_obs_tokens)
    record["doc_ids"] = [h.id for h in hits]
    record["doc_scores"] = [h.score for h in hits]
    record["observation"] = obs
    traj.context += obs
