"""`cfbench audit compare-judges RUNS... --judge A --judge B`: how far two judges agree on the same audited questions.

Both judges judged the same admitted questions of each run (RUN/judged/<judge>/step-N.jsonl, in the
same order), so they are compared question by question: whether each resolved a reference, whether
the references they both resolved are the same answer (normalised exact match, either way round), and
on every (label or response, reference) pair both resolved, whether they gave the same verdict. Kappa
is Cohen's (review.cohen_kappa); '-' where undefined.
"""

from __future__ import annotations

from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.training.audit.judge import judged_dir
from cfbench.training.audit.review import cohen_kappa
from cfbench.training.core.answers import matches


def judged(run: Path, spec: str) -> list[dict]:
    folder = judged_dir(run, spec)
    paths = sorted(folder.glob("step-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    if not paths:
        raise CfbenchError(f"{folder}: no judged steps; run `cfbench audit {run} --judge {spec}` first")
    return [row for p in paths for _, row in jsonl.iter_rows(p, jsonl.read_bytes(p))]


def _verdicts(q: dict) -> list[bool | None]:
    """The label's verdict, then each response's (None: unresolved)."""
    label = q["label"]["correct"] if q["label"] else None
    return [label, *(r["correct"] for r in q["responses"])]


def compare(runs: list[Path], a: str, b: str) -> dict:
    resolved: list[tuple[bool, bool]] = []
    same_answer = both = 0
    verdicts: list[tuple[bool, bool]] = []
    for run in runs:
        qa, qb = judged(run, a), judged(run, b)
        if [(q["step"], q["question"]) for q in qa] != [(q["step"], q["question"]) for q in qb]:
            raise CfbenchError(f"{run}: {a} and {b} judged different questions; audit the run again with both judges")
        for x, y in zip(qa, qb):
            rx, ry = x["reference"]["status"] == "resolved", y["reference"]["status"] == "resolved"
            resolved.append((rx, ry))
            if rx and ry:
                both += 1
                same_answer += matches(x["reference"]["answer"], y["reference"]["answer"]) or matches(
                    y["reference"]["answer"], x["reference"]["answer"]
                )
                verdicts += [(u, v) for u, v in zip(_verdicts(x), _verdicts(y)) if u is not None and v is not None]
    return {
        "runs": [str(run) for run in runs],
        "judges": [a, b],
        "questions": len(resolved),
        "resolved": {a: sum(x for x, _ in resolved), b: sum(y for _, y in resolved), "both": both},
        "resolved_agreement": sum(x == y for x, y in resolved) / len(resolved) if resolved else None,
        "resolved_kappa": cohen_kappa(resolved),
        "same_reference_answer": same_answer,
        "pairs_both_resolved": len(verdicts),
        "verdict_agreement": sum(u == v for u, v in verdicts) / len(verdicts) if verdicts else None,
        "verdict_kappa": cohen_kappa(verdicts),
    }


def table(report: dict) -> str:
    a, b = report["judges"]
    r = report["resolved"]

    def num(x):
        return "-" if x is None else f"{x:.3f}"

    return (
        "\n".join(
            [
                f"Judge agreement: {a} vs {b} on the same {report['questions']} judged questions of {', '.join(report['runs'])}",
                "",
                "| measure | value |",
                "|---|---:|",
                f"| questions resolved by {a} | {r[a]} |",
                f"| questions resolved by {b} | {r[b]} |",
                f"| resolved by both | {r['both']} |",
                f"| agreement on resolved or not | {num(report['resolved_agreement'])} |",
                f"| Cohen's kappa on resolved or not | {num(report['resolved_kappa'])} |",
                f"| both resolved, same reference answer | {report['same_reference_answer']} of {r['both']} |",
                f"| pairs both resolved | {report['pairs_both_resolved']} |",
                f"| verdict agreement on those pairs | {num(report['verdict_agreement'])} |",
                f"| Cohen's kappa on those verdicts | {num(report['verdict_kappa'])} |",
            ]
        )
        + "\n"
    )
