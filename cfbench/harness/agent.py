"""The protocol-v1 agent loop, stepping every active trajectory of a batch in lockstep.

Each turn makes one batched generate call for all active trajectories and one batched retrieval
for all their searches. A trajectory ends at its first answer; after `max_searches` search or
invalid turns it gets one last generation in which a search is not executed.

The same loop scores evaluation (greedy) and rolls out training (sampled): each trajectory keeps its
turns' Completions, so an update trains on the sampled token ids, not on a re-encoding of the text.
"""

from __future__ import annotations

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


def take_turn(traj: Trajectory, completion: Completion, last_turn: bool) -> dict | None:
    """Advance one trajectory by one generated turn: parse its action, record the turn, end the trajectory at an
    answer or its last turn, or add the invalid-action note. Returns the turn's record when its search is to be
    run (`observe` then adds the passages), else None. run_batch and the verl agent loop both step with it."""
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
        return None
    if action == "search":
        return record
    record["observation"] = protocol.INVALID_ACTION
    traj.context += protocol.INVALID_ACTION
    return None


def observe(traj: Trajectory, record: dict, hits: list[Hit], engine: Backend, knobs: Knobs) -> None:
    """The search turn `record` gets its passages, cut to max_obs_tokens of the engine's tokenizer."""
    obs = engine.truncate(protocol.observation(hits), knobs.max_obs_tokens)
    record["doc_ids"] = [h.id for h in hits]
    record["doc_scores"] = [h.score for h in hits]
    record["observation"] = obs
    traj.context += obs


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
    for turn in range(knobs.max_searches + 1):
        active = [t for t in trajs if not t.done]
        if not active:
            break
        last_turn = turn == knobs.max_searches
        generated = backend.generate([t.context for t in active], knobs.max_new_tokens, knobs.max_context_tokens, protocol.STOP)
        searching = [
            (traj, record) for traj, completion in zip(active, generated, strict=True) if (record := take_turn(traj, completion, last_turn))
        ]
        if searching:
            results = retriever.search([record["query"] for _, record in searching], knobs.topk)
            for (traj, record), hits in zip(searching, results, strict=True):
                observe(traj, record, hits, backend, knobs)
            on_searches(len(searching))
    return trajs
