"""A step's rollouts in chunks: the agent loop over at most `rows` trajectories at a time.

A sampling engine holds the K/V cache of every row it decodes at once, so a step's memory would grow
with prompts x samples; run as consecutive chunks of RLConfig.rollout_rows (absent: all at once)
it is bounded by the knob whatever the batch. `cfbench train --plan` counts the same rows. The hf
engine's kept contexts are freed when the rollouts end, so no K/V outlives them into the update
(which `--plan` assumes).
"""

from __future__ import annotations

from cfbench.harness.agent import Trajectory, run_batch
from cfbench.harness.backends import Backend
from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.protocol import Knobs
from cfbench.harness.retrievers import Retriever
from cfbench.harness.suite import Question


def rollouts(
    questions: list[Question], engine: Backend, retriever: Retriever, knobs: Knobs, rows: int | None, user_prompts: list[str] | None = None
) -> list[Trajectory]:
    rows = rows or max(len(questions), 1)
    out: list[Trajectory] = []
    for start in range(0, len(questions), rows):
        prompts = None if user_prompts is None else user_prompts[start : start + rows]
        out += run_batch(questions[start : start + rows], engine, retriever, knobs, user_prompts=prompts)
    if isinstance(engine, HFBackend):
        engine.release()
    return out
