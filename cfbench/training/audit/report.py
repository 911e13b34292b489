"""The audit's tables, trajectory figure and cost report across treatments, from audit.json records and runs.

Written to the report directory:
    audit.md / audit.csv     T_P, T_S, A, F, L and coverage per treatment and round (mean of step rates),
                             with admitted questions / source tasks and resolved pairs / pairs, and the
                             run's rates pooled over all its pairs (round "all");
                             audit.md also gives coverage and the rates per hop count, and per label
                             provenance (solver with / without same-source history, proposer), over each run
    steps.csv                the same per step
    trajectory.png           A, T_S, T_P and F across steps for every treatment side by side, round
                             boundaries dotted and round means as flat segments (the study's figure)
    cost.md / cost.json      per treatment: generations per candidate, MSV verification generations,
                             audit judge requests, generated tokens, wall time, accelerator-hours (hours
                             on the run's device, CPU included), CPU-hours (CPU time of every thread, so
                             time a run spent paused or waiting does not count) and the device, and each
                             as a ratio to Dr. Zero (per source task, so runs of other lengths compare)
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from cfbench.harness.runrecord import dumps, write_atomic
from cfbench.training.audit.audit import RATES, out_dir

_COLUMNS = (*RATES, "coverage")
_COUNTS = ("tasks", "questions", "pairs", "resolved_pairs")
_PANELS = ("A", "T_S", "T_P", "F")


def _num(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _csv(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return buf.getvalue()


def labels(records: list[dict]) -> list[str]:
    """Each record's treatment label, with its run directory's name where two runs share one."""
    plain = [r["label"] for r in records]
    return [f"{p} [{Path(r['run']).name}]" if plain.count(p) > 1 else p for p, r in zip(plain, records)]


def rate_tables(records: list[dict]) -> tuple[str, str, str]:
    """(markdown, per-round csv, per-step csv)."""
    names = labels(records)
    judges = sorted({r["judge"]["identity"] for r in records})
    md = [
        "# Co-cheating audit",
        "",
        f"Judge: {', '.join(judges)}. Rates over resolved (label, response) pairs; a round is the mean "
        "of its step rates. F = response matches the label and both are wrong; L = response right, label wrong.",
        "",
        "| treatment | round | steps | admitted | resolved pairs | " + " | ".join(_COLUMNS) + " |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(_COLUMNS),
    ]
    rounds, steps = [], []
    for name, r in zip(names, records):
        for row in r["rounds"]:
            md.append(
                f"| {name} | {row['round']} | {row['steps_with_pairs']}/{row['steps']} | {row['questions']}/{row['tasks']} | "
                f"{row['resolved_pairs']}/{row['pairs']} | " + " | ".join(_num(row[c]) for c in _COLUMNS) + " |"
            )
            rounds.append([name, row["round"], row["steps"], row["steps_with_pairs"], *(row[c] for c in (*_COUNTS, *_COLUMNS))])
        whole = r["overall"] | {"tasks": sum(row["tasks"] for row in r["rounds"])}
        md.append(
            f"| {name} | all (pooled) | | {whole['questions']}/{whole['tasks']} | "
            f"{whole['resolved_pairs']}/{whole['pairs']} | " + " | ".join(_num(whole[c]) for c in _COLUMNS) + " |"
        )
        rounds.append(
            [name, "all", len(r["steps"]), sum(row["steps_with_pairs"] for row in r["rounds"]), *(whole[c] for c in (*_COUNTS, *_COLUMNS))]
        )
        for row in r["steps"]:
            steps.append(
                [
                    name,
                    row["step"],
                    row["round"],
                    row["phase"],
                    row["tasks"],
                    row["questions"],
                    row["pairs"],
                    row["resolved_pairs"],
                    *(row[c] for c in _COLUMNS),
                ]
            )
    md += [
        "",
        "steps: steps with at least one resolved pair / steps audited. admitted: admitted questions / source tasks. "
        "all (pooled): the run's rates over all its resolved pairs at once, not a mean of step rates.",
    ]
    md += _breakdown(
        records,
        names,
        "hops",
        "hops",
        "By hop count",
        "Over each run's judged questions; a multi-hop question is judged on its source and the proposer's retrieved passages.",
    )
    md += _breakdown(
        records,
        names,
        "labels",
        "label_from",
        "By label provenance",
        "Over each run's judged questions, by the model whose answer became the label and whether it had trained on the question's source.",
    )
    return (
        "\n".join(md) + "\n",
        _csv(["treatment", "round", "steps", "steps_with_pairs", *_COUNTS, *_COLUMNS], rounds),
        _csv(["treatment", "step", "round", "phase", "tasks", "questions", "pairs", "resolved_pairs", *_COLUMNS], steps),
    )


def _breakdown(records: list[dict], names: list[str], key: str, by: str, title: str, note: str) -> list[str]:
    """A markdown section of each record's rates split by `by` (record[key] holds one row per value)."""
    md = [
        "",
        f"## {title}",
        "",
        note,
        "",
        f"| treatment | {by.replace('_', ' ')} | questions | resolved questions | " + " | ".join(_COLUMNS) + " |",
        "|---|---|---:|---:|" + "---:|" * len(_COLUMNS),
    ]
    for name, r in zip(names, records):
        md += [
            f"| {name} | {row[by]} | {row['questions']} | {row['resolved_questions']} | "
            + " | ".join(_num(row[c]) for c in _COLUMNS)
            + " |"
            for row in r[key]
        ]
    return md


def plot_trajectory(records: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [s["step"] for r in records for s in r["steps"]]
    schedules = {tuple((s["step"], s["round"]) for s in r["steps"]) for r in records}
    first = [min(s["step"] for s in records[0]["steps"] if s["round"] == row["round"]) for row in records[0]["rounds"]]
    boundaries = first[1:] if len(schedules) == 1 else []  # treatments on other schedules: no shared round lines
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True, sharex=True)
    for ax, key in zip(axes.flat, _PANELS):
        for name, r in zip(labels(records), records):
            (line,) = ax.plot(
                [s["step"] for s in r["steps"]],
                [math.nan if s[key] is None else s[key] for s in r["steps"]],
                marker="o",
                markersize=3,
                label=name,
            )
            for row in r["rounds"]:
                mine = [s["step"] for s in r["steps"] if s["round"] == row["round"]]
                if row[key] is not None:
                    ax.hlines(row[key], min(mine) - 0.5, max(mine) + 0.5, colors=line.get_color(), linewidth=3, alpha=0.35)
        for step in boundaries:
            ax.axvline(step - 0.5, color="grey", linestyle=":")
        ax.set_title(
            {"A": "A: agreement with the label", "T_S": "T_S: solver correct", "T_P": "T_P: label correct", "F": "F: false-agreement mass"}[
                key
            ],
            fontsize=10,
        )
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step (dotted: round boundaries; bands: round means)", fontsize=8)
    axes.flat[0].legend(fontsize=8)
    fig.savefig(out, dpi=100, metadata={"Software": None})
    plt.close(fig)


def run_cost(run: Path, record: dict) -> dict:
    """What a run spent, from its metrics.jsonl, and the audit judge requests it needed."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    total = {k: sum(r[k] for r in rows) for k in ("tasks", "candidates", "admitted", "generations", "msv_generations")}
    tokens = None if any("generated_tokens" not in r for r in rows) else sum(r["generated_tokens"] for r in rows)
    wall = sum(r["rollout_s"] + r["update_s"] for r in rows)
    device_s = sum((r["rollout_s"] + r["update_s"]) * r.get("processes", 1) for r in rows)  # a multi-process step held every device
    cpu = None if any("cpu_s" not in r for r in rows) else sum(r["cpu_s"] for r in rows)
    devices = sorted({r.get("device", "unknown") for r in rows})
    return {
        "label": record["label"],
        "run": record["run"],
        "steps": len(rows),
        **total,
        "generations_per_candidate": total["generations"] / total["candidates"] if total["candidates"] else None,
        "judge_requests": record["judge_requests"]["needed"],
        "generated_tokens": tokens,
        "wall_s": round(wall, 3),
        "device": ", ".join(devices),
        "accelerator_hours": device_s / 3600,
        "cpu_hours": None if cpu is None else cpu / 3600,
    }


_RATIOS = (
    "generations",
    "generations_per_candidate",
    "msv_generations",
    "judge_requests",
    "generated_tokens",
    "wall_s",
    "accelerator_hours",
    "cpu_hours",
)


def cost_report(costs: list[dict], names: list[str]) -> tuple[str, dict]:
    """Markdown and JSON; ratios are per-task costs over Dr. Zero's (None without one Dr. Zero run)."""
    base = [c for c in costs if c["label"] == "dr-zero"]
    base = base[0] if len(base) == 1 else None
    for c in costs:
        c["ratio_to_dr_zero"] = {k: _ratio(c, base, k) for k in _RATIOS}
    md = [
        "# Cost per treatment",
        "",
        "Ratios are to Dr. Zero, per source task." if base else "No single Dr. Zero run in this report, so no ratios.",
        "",
        "| treatment | tasks | generations / candidate | MSV generations | judge requests | generated tokens | wall "
        "| accelerator-hours | CPU-hours | device |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, c in zip(names, costs):
        r = c["ratio_to_dr_zero"]
        md.append(
            f"| {name} | {c['tasks']} | {_num(c['generations_per_candidate'], '.1f')}{_x(r['generations_per_candidate'])} | "
            f"{c['msv_generations']}{_x(r['msv_generations'])} | "
            f"{c['judge_requests']}{_x(r['judge_requests'])} | {_num(c['generated_tokens'], 'd')}{_x(r['generated_tokens'])} | "
            f"{c['wall_s'] / 60:.1f} min{_x(r['wall_s'])} | {c['accelerator_hours']:.4f}{_x(r['accelerator_hours'])} | "
            f"{_num(c['cpu_hours'], '.4f')}{_x(r['cpu_hours'])} | {c['device']} |"
        )
    return "\n".join(md) + "\n", {"costs": [{"treatment": n, **c} for n, c in zip(names, costs)]}


def _ratio(c: dict, base: dict | None, key: str) -> float | None:
    if base is None or c[key] is None or not base[key] or not c["tasks"]:
        return None
    if key == "generations_per_candidate":  # already a rate
        return c[key] / base[key]
    return (c[key] / c["tasks"]) / (base[key] / base["tasks"])


def _x(ratio: float | None) -> str:
    return "" if ratio is None else f" ({ratio:.2f}x)"


def write_report(records: list[dict], runs: list[Path], out: Path) -> None:
    out_dir(out, "--report")
    md, rounds_csv, steps_csv = rate_tables(records)
    write_atomic(out / "audit.md", md)
    write_atomic(out / "audit.csv", rounds_csv)
    write_atomic(out / "steps.csv", steps_csv)
    plot_trajectory(records, out / "trajectory.png")
    cost_md, cost_json = cost_report([run_cost(run, r) for run, r in zip(runs, records)], labels(records))
    write_atomic(out / "cost.md", cost_md)
    write_atomic(out / "cost.json", dumps(cost_json) + "\n")
