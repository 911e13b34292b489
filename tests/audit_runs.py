"""Constructed self-evolution run directories for the audit tests: a labelled corpus and audit rows by hand.

The numbers each construction should give are worked out in the comments of CASES, so the tests can
compare the audit's arithmetic with a hand count.
"""

from __future__ import annotations

import json
from pathlib import Path

from cfbench.training.config.schema import to_json
from cfbench.training.treatments import load_config

CORPUS = [
    {"id": "paris", "contents": '"Paris"\nParis is the capital of France. It lies on the Seine.', "answers": ["Paris"]},
    {
        "id": "everest",
        "contents": '"Mount Everest"\nMount Everest is the highest mountain. Its height is 8849 metres above sea level.',
        "answers": ["8849 metres", "8,849 m"],
    },
    {"id": "nile", "contents": '"Nile"\nThe Nile flows north into the Mediterranean.'},  # no gold: unresolved
    {"id": "moon", "contents": '"Moon"\nThe Moon orbits the Earth.', "answers": ["Apollo 11"]},  # gold not in the source: unresolved
]
SOURCES = {row["id"]: row["contents"] for row in CORPUS}
SCHEDULE = {"rounds": 3, "proposer_steps": 1, "solver_steps": 1, "steps": 6}  # rounds of 2 steps: a proposer step, a solver step


def row(
    step: int,
    round_: int,
    slot: int,
    source: str,
    label: str | None,
    responses: list[str],
    question: str = "",
    hops: int = 1,
    evidence: list | None = None,
    contents: str | None = None,
) -> dict:
    """An audit row as the run writes it; `evidence` are the proposer's retrieved passages, `contents` a source outside CORPUS."""
    admitted = label is not None
    return {
        "step": step,
        "round": round_,
        "phase": "proposer" if step % 2 else "solver",
        "task_id": f"s{step}-t{slot}",
        "source_id": source,
        "source": contents or SOURCES[source],
        "hops": hops,
        "fold": 0,
        "proposer_turns": [],
        "evidence": evidence or [],
        "draft_question": question or f"About {source}?",
        "draft_label": label or "",
        "format": 1.0,
        "parse_error": None if admitted else "no <question> tag",
        "msv": None,
        "admitted": admitted,
        "adopted_label": label,
        "scorer": "main" if admitted else None,
        "scorer_provenance": None,
        "solver_responses": [{"prediction": p, "turns": []} for p in responses],
        "k": None,
        "proposer_reward": 0.0,
    }


# step -> rows. Step 1 (round 1): paris label right, responses right/right/wrong/empty/right, matching T,T,F,F,T;
# everest label wrong ("8000 metres"), responses wrong+match x2 (F), right x2 (L), wrong; nile unresolved; one rejected
# draft. Resolved pairs 10 of 15: T_P .5, T_S .5, A .5, F .2, L .2, coverage 2/3.
# Step 2 (round 1): everest, every response agrees with the wrong label "K2": T_P 0, T_S 0, A 1, F 1, L 0, coverage 1.
# Step 3 (round 2): only moon (unresolved): no rates, coverage 0.
CASES = {
    1: [
        row(1, 1, 0, "paris", "Paris", ["Paris", "paris.", "Lyon", "", "The Paris"]),
        row(1, 1, 1, "everest", "8000 metres", ["8000 metres", "8000 Metres", "8849 metres", "8,849 m", "K2"]),
        row(1, 1, 2, "nile", "north", ["north"] * 5),
        row(1, 1, 3, "paris", None, []),
    ],
    2: [row(2, 1, 0, "everest", "K2", ["K2"] * 5)],
    3: [row(3, 2, 0, "moon", "Neil Armstrong", ["Neil Armstrong"] * 5)],
}


def make_run(
    path: Path,
    treatment: str = "dr-zero",
    cases: dict = CASES,
    generations: int = 10,
    tokens: int = 100,
    cpu: float | None = 20.0,
    overrides: dict | None = None,
    corpus_rows: list[dict] = CORPUS,
) -> Path:
    """A run directory as `cfbench train` leaves one: config.json, metrics.jsonl, audit/step-N.jsonl, over a labelled corpus."""
    (path / "audit").mkdir(parents=True)
    corpus = path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in corpus_rows))
    config = load_config(treatment, "cpu-smoke", corpus=str(corpus)) | SCHEDULE | (overrides or {})
    (path / "config.json").write_text(json.dumps(to_json(config)))
    metrics = []
    for step, rows in cases.items():
        (path / "audit" / f"step-{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        metrics.append(
            {
                "step": step,
                "round": rows[0]["round"],
                "phase": rows[0]["phase"],
                "tasks": 4,
                "candidates": 2,
                "admitted": 2,
                "generations": generations,
                "msv_generations": 12 if config.msv else 0,
                "generated_tokens": tokens,
                "rollout_s": 30.0,
                "update_s": 6.0,
                "device": "cpu",
                **({} if cpu is None else {"cpu_s": cpu}),
            }
        )
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return path
