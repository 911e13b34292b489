"""`cfbench audit`: judge a self-evolution run's saved steps and measure co-cheating (docs/protocol.md §6).

For every admitted question of every saved step (audit/step-N.jsonl) the judge builds a reference
from the source (training/judge.py) and judges the adopted label and each of the scorer's responses.
Per step, over resolved (label, response) pairs:
    T_P  the label is correct            T_S  the response is correct
    A    the response matches the label under the run's matcher (what the loop rewarded)
    F    the response matches the label and both are wrong (false-agreement mass)
    L    the response is correct and the label wrong (lost credit)
and coverage = resolved pairs / pairs, also over the whole run per hop count (a 2-4-hop question is
judged on its source and the passages the proposer retrieved; see judge.py), and per label
provenance: labels from a solver that had trained on the question's source (MSV's majority once
sources recur), from a solver that had not, and the proposer's drafts. A response that matches the label shares the label's verdict
(one answer, one verdict: F stays inside A). A pair is unresolved when its question's reference is
unresolved or a verdict on it was unreadable. A round's value is the mean of its steps' rates (steps
without a resolved pair have no rate and are left out). The audit only reads the run.

Output, in RUN_DIR/judged/<judge>/ (or --out): step-N.jsonl (every judged question: reference with
its quote, verdicts, matches), audit.json (judge, per-step and per-round rates, judge requests),
and the judge's cache. A rerun answers every judge call from the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import shown
from cfbench.harness.runrecord import dumps, write_atomic
from cfbench.training.audit.judge import Verdict
from cfbench.training.config.classes import SelfEvolutionConfig, TrainingConfig, read_run_config
from cfbench.training.config.schema import to_json
from cfbench.training.core.answers import MATCHER, matches

AUDIT_VERSION = 3  # 3: tasks per step, a round's counts, the run's pooled rates (overall)
RATES = ("T_P", "T_S", "A", "F", "L")
CACHE_FILE = "judge-cache.jsonl"


def treatment_label(config: TrainingConfig) -> str:
    label = config.treatment
    if isinstance(config, SelfEvolutionConfig) and config.control != "none":
        label += f" ({config.control})"
    if isinstance(config, SelfEvolutionConfig) and config.aux_budget != "full":
        label += f" ({config.aux_budget} aux budget)"
    return label


def run_config(run: Path) -> TrainingConfig:
    path = run / "config.json"
    if not path.is_file():
        raise CfbenchError(f"{run}: no config.json; pass the directory of a `cfbench train` self-evolution run")
    config = read_run_config(path)
    if not (run / "audit").is_dir():
        raise CfbenchError(
            f"{run}: a {config.treatment!r} run has no audit/ records; only the self-evolution treatments "
            "(dr-zero, msv, crossfit, msv-crossfit) are audited"
        )
    if not (run / "metrics.jsonl").is_file():
        raise CfbenchError(f"{run}: no metrics.jsonl beside audit/; the run directory is incomplete")
    return config


def out_dir(path: Path, what: str) -> Path:
    """A directory to write into, created; an existing file there is an error."""
    if path.exists() and not path.is_dir():
        raise CfbenchError(f"{what} {path} is a file; pass a directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


def saved_steps(run: Path) -> list[tuple[int, list[dict]]]:
    """(step, rows) of every audit/step-N.jsonl, in step order."""
    found = [
        (int(path.stem.split("-")[1]), [row for _, row in jsonl.iter_rows(path, jsonl.read_bytes(path))])
        for path in (run / "audit").glob("step-*.jsonl")
    ]
    if not found:
        raise CfbenchError(f"{run}/audit holds no step-N.jsonl records yet; audit the run after its first step")
    return sorted(found, key=lambda x: x[0])


def judge_rows(rows: list[dict], judge) -> list[dict]:
    """The admitted questions of one step, judged. A response that matches the label shares the label's verdict."""
    admitted = [r for r in rows if r["admitted"]]
    asked = [
        {"source_id": r["source_id"], "source": r["source"], "question": r["draft_question"], "evidence": r.get("evidence", [])}
        for r in admitted
    ]  # runs recorded before evidence was: the source alone
    refs = judge.references(asked)
    items, owners = [], []  # per resolved question: its label (j = -1), then each response that does not match the label
    for i, (a, r, ref) in enumerate(zip(asked, admitted, refs)):
        if ref.status == "resolved":
            for j, answer in [
                (-1, r["adopted_label"]),
                *((j, x["prediction"]) for j, x in enumerate(r["solver_responses"]) if not matches(x["prediction"], r["adopted_label"])),
            ]:
                items.append((a, ref, answer))
                owners.append((i, j))
    verdicts = dict(zip(owners, judge.verdicts(items)))
    judged = []
    for i, (r, ref) in enumerate(zip(admitted, refs)):
        label = verdicts.get((i, -1))
        responses = []
        for j, x in enumerate(r["solver_responses"]):
            agree = matches(x["prediction"], r["adopted_label"])
            v = (label and Verdict(label.correct, "label")) if agree else verdicts.get((i, j))
            responses.append(
                {"prediction": x["prediction"], "matches_label": agree, "correct": v.correct if v else None, "by": v.by if v else None}
            )
        judged.append(
            {
                "step": r["step"],
                "round": r["round"],
                "phase": r["phase"],
                "task_id": r["task_id"],
                "source_id": r["source_id"],
                "hops": r["hops"],
                "evidence": asked[i]["evidence"],
                "source": r["source"],
                "question": r["draft_question"],
                "adopted_label": r["adopted_label"],
                "reference": ref.to_json(),
                "scorer": r["scorer"],
                "scorer_provenance": r["scorer_provenance"],
                "label_provenance": r.get("label_provenance"),  # None: a run recorded before labels carried it
                "label": None if label is None else {"correct": label.correct, "by": label.by},
                "responses": responses,
            }
        )
    return judged


def rates(judged: list[dict]) -> dict:
    """T_P, T_S, A, F, L over the resolved pairs of some judged questions, with coverage."""
    pairs = [(q, x) for q in judged for x in q["responses"]]
    done = [
        (q["label"]["correct"], x["correct"], x["matches_label"])
        for q, x in pairs
        if q["label"] is not None and q["label"]["correct"] is not None and x["correct"] is not None
    ]
    n = len(done)

    def share(test: Callable[[bool, bool, bool], bool]) -> float | None:
        return sum(test(*d) for d in done) / n if n else None

    return {
        "questions": len(judged),
        "resolved_questions": sum(q["reference"]["status"] == "resolved" for q in judged),
        "pairs": len(pairs),
        "resolved_pairs": n,
        "coverage": n / len(pairs) if pairs else None,
        "T_P": share(lambda lab, res, agree: lab),
        "T_S": share(lambda lab, res, agree: res),
        "A": share(lambda lab, res, agree: agree),
        "F": share(lambda lab, res, agree: agree and not lab and not res),
        "L": share(lambda lab, res, agree: res and not lab),
    }


def by_hops(judged: list[dict]) -> list[dict]:
    """Rates and coverage per hop count over all judged questions of a run."""
    return [{"hops": n, **rates([q for q in judged if q["hops"] == n])} for n in sorted({q["hops"] for q in judged})]


LABEL_FROM = ("solver trained on the source", "solver not trained on the source", "proposer", "unrecorded")


def label_from(q: dict) -> str:
    lp = q["label_provenance"]
    if lp is None:
        return "unrecorded"
    if lp["model"] == "proposer":
        return "proposer"
    return LABEL_FROM[0] if lp["trained_on_this_source"] else LABEL_FROM[1]


def by_label_provenance(judged: list[dict]) -> list[dict]:
    """Rates (F above all) over each run's judged questions, split by where their label came from."""
    return [{"label_from": g, **rates(mine)} for g in LABEL_FROM if (mine := [q for q in judged if label_from(q) == g])]


COUNTS = ("tasks", "questions", "resolved_questions", "pairs", "resolved_pairs")  # summed over a round's steps


def round_means(steps: list[dict]) -> list[dict]:
    """Each round's rates as the plain mean of its steps' rates (steps without a rate left out), and its COUNTS summed."""
    out = []
    for r in sorted({s["round"] for s in steps}):
        mine = [s for s in steps if s["round"] == r]
        row = {"round": r, "steps": len(mine), "steps_with_pairs": sum(s["resolved_pairs"] > 0 for s in mine)}
        row |= {k: sum(s[k] for s in mine) for k in COUNTS}
        for key in (*RATES, "coverage"):
            values = [s[key] for s in mine if s[key] is not None]
            row[key] = sum(values) / len(values) if values else None
        out.append(row)
    return out


def audit_run(run: Path, judge, out: Path, on_step: Callable[[int], None] = lambda step: None) -> dict:
    """Judge every saved step of `run` into `out`; returns (and writes) audit.json's record."""
    from cfbench.training.selfevolve.loop import schedule

    config = run_config(run)
    out_dir(out, "audit output")
    saved = saved_steps(run)
    numbers = {step for step, _ in saved}
    steps, everything, per_step = [], [], []
    for step, rows in saved:
        judged = judge_rows(rows, judge)
        everything += judged
        per_step.append((step, judged))
        round_, phase, _ = schedule(config, step)
        steps.append({"step": step, "round": round_, "phase": phase, "tasks": len(rows), **rates(judged)})
        on_step(step)
    judge.require_answers()  # a sheet judge still waiting: stop before out/ changes
    for stale in out.glob("step-*.jsonl"):  # judged steps a resumed run has since replaced or dropped
        if int(stale.stem.split("-")[1]) not in numbers:
            stale.unlink()
    for step, judged in per_step:
        jsonl.write_jsonl(out / f"step-{step}.jsonl", judged)
    record = {
        "audit_version": AUDIT_VERSION,
        "run": shown(run),
        "treatment": config.treatment,
        "label": treatment_label(config),
        "config": to_json(config),
        "judge": judge.describe(),
        "matcher": MATCHER,
        "judge_requests": {"needed": judge.needed, "sent": judge.sent},
        "steps": steps,
        "rounds": round_means(steps),
        "overall": rates(everything),
        "hops": by_hops(everything),
        "labels": by_label_provenance(everything),
    }
    write_atomic(out / "audit.json", dumps(record) + "\n")
    return record
