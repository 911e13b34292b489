"""The values the self-evolution knobs may take, and the schedule rule one of them sets.

They belong to the configuration: the config classes check knobs against them, and the modules that
act on a knob (selfevolve/crossfit.py, selfevolve/proposer.py, the CLI) read them from here, so the
configuration imports nothing from the code it configures.
"""

from __future__ import annotations

CONTROLS = ("none", "same-source", "full-data", "random-split")  # CrossFit controls: who scores a question (selfevolve/crossfit.py)
AUX_BUDGETS = ("full", "half")  # the auxiliary solvers' updates: every solver step, or every other one
FORMATS = ("strict", "graded")  # the proposer's format term (selfevolve/proposer.py)


def aux_updates_now(aux_budget: str, solver_step_in_round: int) -> bool:
    """Whether the auxiliary solvers update at this solver step of a round: always under `full`, every other step under `half`."""
    return aux_budget == "full" or solver_step_in_round % 2 == 0
