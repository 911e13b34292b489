"""CrossFit routing: which solver scores a question, which solvers train on it, and what each has seen.

CrossFit keeps two auxiliary solvers, `aux-0` and `aux-1`; `aux-h` trains only on admitted
questions of fold h, and a fold-h question gets its proposer reward from `aux-(1-h)`. The main
solver trains on every admitted question either way. Without CrossFit the main solver both scores
and trains (Dr. Zero's coupled loop).

Controls (CrossFit treatments only):
    same-source   a fold-h question is scored by `aux-h`, the solver trained on its own fold
    full-data     one auxiliary solver, `aux-all`, trains on every question and scores every question
    random-split  folds by question id rather than source id, so one source feeds both solvers
`aux_budget: half` gives the auxiliary solvers every other solver update (half the budget: config/choices.py).

Provenance records, per solver (and the proposer), the folds and source ids it has trained on; every
scored question carries its scorer's provenance at scoring time, and its label the provenance of the
model that produced it, so the audit can check the feedback path.
"""

from __future__ import annotations

from cfbench.training.selfevolve.sources import Task, fold_of


def solvers(crossfit: bool, control: str) -> list[str]:
    if not crossfit:
        return ["main"]
    return ["main", "aux-all"] if control == "full-data" else ["main", "aux-0", "aux-1"]


def fold(task: Task, folds: dict[str, int], control: str) -> int:
    """The task's fold: its source's, decided once for the run (random-split: its own question id's)."""
    return fold_of(task.id) if control == "random-split" else folds[task.source_id]


def scorer(fold_h: int, crossfit: bool, control: str) -> str:
    if not crossfit:
        return "main"
    if control == "full-data":
        return "aux-all"
    return f"aux-{fold_h}" if control == "same-source" else f"aux-{1 - fold_h}"


def trainers(fold_h: int, crossfit: bool, control: str) -> list[str]:
    """The solvers that train on an admitted fold-h question: the main solver, and its fold's auxiliary."""
    if not crossfit:
        return ["main"]
    return ["main", "aux-all" if control == "full-data" else f"aux-{fold_h}"]


class Provenance:
    def __init__(self, names: list[str], saved: dict | None = None) -> None:
        saved = saved or {}
        self.folds = {n: set(saved.get(n, {}).get("folds", [])) for n in names}
        self.sources = {n: set(saved.get(n, {}).get("sources", [])) for n in names}

    def add(self, name: str, fold_h: int, source_id: str) -> None:
        self.folds[name].add(fold_h)
        self.sources[name].add(source_id)

    def of(self, name: str, source_id: str) -> dict:
        """What `name` had trained on when it scores a question from `source_id`."""
        return {
            "trained_on_folds": sorted(self.folds[name]),
            "trained_on_this_source": source_id in self.sources[name],
            "sources_trained_on": len(self.sources[name]),
        }

    def to_json(self) -> dict:
        return {n: {"folds": sorted(self.folds[n]), "sources": sorted(self.sources[n])} for n in self.folds}
