"""Share of a benchmark's fixed1325 questions (with known evidence) whose gold passage is retrieved in the top 3."""

import json

from cfbench.harness.paths import TASKS_DIR


def top3_recall(retriever, benchmark: str) -> float:
    rows = [json.loads(line) for line in (TASKS_DIR / "suites" / "fixed1325.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["benchmark"] == benchmark and r["evidence_ids"]]
    results = retriever.search([r["question"] for r in rows], 3)
    return sum(bool(set(r["evidence_ids"]) & {h.id for h in res}) for r, res in zip(rows, results)) / len(rows)
