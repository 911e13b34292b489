"""STUDY.md's tables, generated from the committed records: `python leaderboards/fixed1325/study/tables.py --write`.

Each table sits in STUDY.md between `<!-- generated: NAME -->` and `<!-- end: NAME -->`; --write
replaces them with what the records give now, --check (what tests/test_study_tables.py runs) exits 1
naming every block that differs. Sources, all committed:
- results, orderings, status, checks, changes: the leaderboard's ranks (leaderboards/fixed1325/results.json), the
  stored runs (leaderboards/fixed1325/runs/, rescored from their predictions by cfbench.leaderboard.store)
  and the paired bootstrap of cfbench.harness.stats (docs/protocol.md §3.5), the same code the
  leaderboard uses;
- admissions, pooled, training, search_r1: each run's judged/*/audit.json and metrics.jsonl;
- round3: each run's judged/sheet-llm-annotators/audit.json (`cfbench audit`);
- cost: study/audit/cost.json (`cfbench audit --report`) and study/search-r1/metrics.jsonl;
- replay: study/replay/replay.json (`cfbench replay`);
- judges: each run's judged/reference/ and judged/sheet-llm-annotators/ steps (`cfbench audit compare-judges`);
- the study's own numbers: cfbench/leaderboard/reported.py and docs/protocol.md §7 (F by round).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from cfbench.harness import stats
from cfbench.harness.metrics import BENCHMARKS
from cfbench.leaderboard.reported import reported
from cfbench.leaderboard.store import load_run
from cfbench.training.audit import judges_agree

SUITE = Path(__file__).resolve().parents[1]
STUDY = SUITE / "study"
# Each treatment's fixed1325 entry (leaderboards/fixed1325/runs/<id>) and training run (study/<folder>).
TREATMENTS = {
    "Base (warm start)": ("ec5b8ca46e848cca", None),
    "Search-R1": ("d0704979bbf390b1", "search-r1"),
    "Dr. Zero": ("5e50d6448fe13248", "dr-zero"),
    "MSV": ("791021f8c7df7303", "msv"),
    "CrossFit": ("18bb4ebe429b9b58", "crossfit"),
    "MSV+CrossFit": ("801c2a57e90356c2", "msv-crossfit"),
}
UNTRAINED = "1b65c44e5254cce3"  # SmolLM2-135M untrained, stored with scores only
REPORTED_BASE = "Base (Qwen3.5, untrained)"  # the study's Base row in reported.py
STUDY_F3 = {"Dr. Zero": (0.061, 0.088), "MSV": (0.057, 0.072), "CrossFit": (0.030, 0.037)}  # protocol.md §7, round 3, 4B / 9B
SHEET = "sheet-llm-annotators"
# The study's orderings of avg7 (reported.py): each pair (higher, lower) that a claim of the study rests on.
ORDERINGS = [
    ("Search-R1", "Base (warm start)"),
    ("Dr. Zero", "Base (warm start)"),
    ("MSV", "Dr. Zero"),
    ("CrossFit", "Dr. Zero"),
    ("CrossFit", "Search-R1"),
    ("MSV+CrossFit", "CrossFit"),
    ("MSV+CrossFit", "MSV"),
]
SIGNAL = STUDY / "signal"  # the recipe with signal's trainings (issue 35): study/signal/<folder>
BENCHMARK_NAMES = {"2wikimultihopqa": "2wiki"}


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def signed(x: float) -> str:
    return f"{100 * x:+.1f}"


def interval(r: dict) -> str:
    return f"{signed(r['delta'])} [{signed(r['lo'])}, {signed(r['hi'])}]"


def p_text(p: float) -> str:
    """A paired p; the smallest 2,000 resamples can give, 1/2,001, is shown as such."""
    return (
        f"{p:.3f}" if p > round(1 / (stats.RESAMPLES + 1), stats.DIGITS) else f"{p:.4f} (the smallest {stats.RESAMPLES:,} resamples give)"
    )


def row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def runs() -> dict[str, object]:
    return {t: load_run(SUITE / "runs" / run_id) for t, (run_id, _) in TREATMENTS.items()}


def same_trajectories(a, b) -> int:
    by_id = {t["id"]: t for t in b.trajectories}
    return sum(t == by_id.get(t["id"]) for t in a.trajectories)


def value(run, name: str) -> dict:
    return stats.intervals(run.rows)[name]["cover_em"] | {"value": run.results["scores"][name]["cover_em"]}


def results(loaded: dict) -> str:
    study = {r["treatment"]: r["avg7"] for r in reported("fixed1325")["rows"]}
    warm = loaded["Base (warm start)"]
    board = json.loads((SUITE / "results.json").read_text())
    rank = {m["id"]: row["rank"] for table in board["tables"][:1] for row in table["runs"] for m in row["members"]}
    out = [
        row(["treatment", "leaderboard rank", "135M avg7", "multi-hop", "single-hop", "vs warm start (p)", "study 4B", "study 9B"]),
        row(["---"] * 8),
    ]
    for treatment, run in loaded.items():
        avg = value(run, "avg7")
        if run is warm:
            versus = "(the reference)"
        elif same_trajectories(run, warm) == len(run.trajectories):
            versus = f"0.0 ({len(run.trajectories):,} of {len(warm.trajectories):,} trajectories identical)"
        else:
            r = stats.paired(run.rows, warm.rows)["avg7"]["cover_em"]
            versus = f"{interval(r)} ({p_text(r['p'])})"
        reported_row = study[REPORTED_BASE if run is warm else treatment]
        out.append(
            row(
                [
                    treatment,
                    rank[run.id],
                    f"{pct(avg['value'])} [{pct(avg['lo'])}, {pct(avg['hi'])}]",
                    pct(run.results["scores"]["multi_hop"]["cover_em"]),
                    pct(run.results["scores"]["single_hop"]["cover_em"]),
                    versus,
                    *(pct(reported_row[scale]) for scale in ("Qwen3.5-4B", "Qwen3.5-9B")),
                ]
            )
        )
    return "\n".join(out)


def signal_runs(loaded: dict) -> dict[str, object]:
    """The recipe with signal's fixed1325 entries, found by the checkpoint they evaluated (study/signal/<folder>/...),
    the warm start shared with the first recipe; a treatment without a published entry is left out."""
    models = {entry.parent: json.loads(entry.read_text())["model"].get("model", "") for entry in (SUITE / "runs").glob("*/results.json")}
    out = {"Base (warm start)": loaded["Base (warm start)"]}
    for treatment, (_, folder) in TREATMENTS.items():
        prefix = f"{SIGNAL.relative_to(SUITE.parents[1])}/{folder}/"
        for entry in sorted(e for e, model in models.items() if folder and model.startswith(prefix)):
            out[treatment] = load_run(entry)
    return out


def _ordering(runs: dict, higher: str, lower: str) -> str:
    """higher - lower at 135M (avg7 Cover-EM, paired bootstrap) and whether it reproduces the study's direction."""
    if higher not in runs or lower not in runs:
        return "not evaluated yet"
    a, b = runs[higher], runs[lower]
    if same_trajectories(a, b) == len(a.trajectories) == len(b.trajectories):
        return f"0.0 (all {len(a.trajectories):,} trajectories identical): no"
    r = stats.paired(a.rows, b.rows)["avg7"]["cover_em"]
    verdict = "yes" if r["delta"] > 0 and r["p"] < 0.05 else "reversed" if r["p"] < 0.05 else "no (not significant)"
    return f"{interval(r)} ({p_text(r['p'])}): {verdict}"


def orderings(loaded: dict) -> str:
    """Each of the study's orderings: its reported difference and the 135M difference under each recipe."""
    study = {r["treatment"]: r["avg7"] for r in reported("fixed1325")["rows"]}
    study["Base (warm start)"] = study[REPORTED_BASE]
    signal = signal_runs(loaded)
    out = [
        row(["ordering (higher > lower)", "study 4B / 9B", "135M, first cpu recipe: reproduces?", "135M, recipe with signal: reproduces?"]),
        row(["---"] * 4),
    ]
    for higher, lower in ORDERINGS:
        reported_diff = " / ".join(signed(study[higher][scale] - study[lower][scale]) for scale in ("Qwen3.5-4B", "Qwen3.5-9B"))
        out.append(row([f"{higher} > {lower}", reported_diff, _ordering(loaded, higher, lower), _ordering(signal, higher, lower)]))
    return "\n".join(out)


def round3() -> str:
    out = [row(["treatment", "135M round-3 F (resolved pairs / pairs)", "study 4B", "study 9B"]), row(["---", "---", "---", "---"])]
    for treatment, (_, folder) in TREATMENTS.items():
        if folder in (None, "search-r1"):
            continue
        audit = json.loads((STUDY / folder / "judged" / SHEET / "audit.json").read_text())
        r3 = next(r for r in audit["rounds"] if r["round"] == 3)
        f = "-" if not r3["resolved_pairs"] else f"{r3['F']:.3f}"
        why = "" if r3["questions"] else ": nothing admitted in round 3"
        study = STUDY_F3.get(treatment)
        out.append(
            row(
                [
                    treatment,
                    f"{f} ({r3['resolved_pairs']} / {r3['pairs']}{why})",
                    *((f"{100 * s:.1f}%" for s in study) if study else ("-", "-")),
                ]
            )
        )
    return "\n".join(out)


def cost() -> str:
    costs = {c["label"]: c for c in json.loads((STUDY / "audit" / "cost.json").read_text())["costs"]}
    metrics = [json.loads(line) for line in (STUDY / "search-r1" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    lines = {"Base (warm start)": (0, 0.0, 0.0)}
    lines["Search-R1"] = (len(metrics), sum(m["rollout_s"] + m["update_s"] for m in metrics), sum(m["cpu_s"] for m in metrics) / 3600)
    for treatment, (_, folder) in TREATMENTS.items():
        if folder in costs:
            c = costs[folder]
            lines[treatment] = (c["steps"], c["wall_s"], c["cpu_hours"])
    reference = lines["Dr. Zero"][2]
    out = [row(["treatment", "steps", "wall", "CPU-hours", "CPU-hours vs Dr. Zero"]), "| --- | ---: | ---: | ---: | ---: |"]
    for treatment in TREATMENTS:
        steps, wall, cpu = lines[treatment]
        out.append(
            row(
                [
                    treatment,
                    steps,
                    f"{wall / 60:.1f} min" if wall else "0",
                    f"{cpu:.2f}" if cpu else "0",
                    f"{cpu / reference:.2f}x" if cpu else "0",
                ]
            )
        )
    return "\n".join(out)


def replay() -> str:
    record = json.loads((STUDY / "replay" / "replay.json").read_text())
    names = {"coupled": "coupled (Dr. Zero's own main solver)", "source-id": "source-id (CrossFit)", "half-budget": "half-budget"}
    order = ("coupled", "source-id", "same-source", "full-data", "random-split", "half-budget")
    out = [row(["feedback", "F", "A", "T_S", "L", "scorer trained on the source", "updates"]), row(["---"] * 7)]
    for name in order:
        v = record["variants"][name]
        f = f"{v['F']:.3f} ({round(v['F'] * v['resolved_pairs'])} / {v['resolved_pairs']})"
        updates = "(the run's)" if name == "coupled" else ", ".join(f"{k} {n}" for k, n in v["updates"].items())
        out.append(
            row([names.get(name, name), f, *(f"{v[k]:.3f}" for k in ("A", "T_S", "L")), f"{v['scorer_trained_on_source']:.2f}", updates])
        )
    return "\n".join(out)


def status(loaded: dict) -> str:
    warm = loaded["Base (warm start)"]
    out = [
        row(["treatment", "trained", "fixed1325 entry", "avg7", "multi-hop", "single-hop", "per benchmark", "evaluation wall (batch)"]),
        row(["---"] * 8),
    ]
    for treatment, run in loaded.items():
        folder = TREATMENTS[treatment][1]
        checkpoint = (
            "(the shipped adapter)" if folder is None else f"`study/{folder}/{max(STUDY.joinpath(folder).glob('checkpoint-*')).name}`"
        )
        avg = value(run, "avg7")
        out.append(
            row(
                [
                    treatment,
                    checkpoint,
                    f"`runs/{run.id}`"
                    + ("" if run is warm else f" ({same_trajectories(run, warm):,} of 1,325 trajectories as the warm start's)"),
                    f"{pct(avg['value'])} [{pct(avg['lo'])}, {pct(avg['hi'])}]",
                    pct(run.results["scores"]["multi_hop"]["cover_em"]),
                    pct(run.results["scores"]["single_hop"]["cover_em"]),
                    ", ".join(f"{BENCHMARK_NAMES.get(b, b)} {pct(run.results['scores'][b]['cover_em'])}" for b in _benchmarks(run)),
                    f"{run.results['wall_time_s'] / 3600:.1f} h ({run.results['batch_size']})",
                ]
            )
        )
    return "\n".join(out)


def _benchmarks(run) -> list[str]:
    return [b for b in BENCHMARKS if b in run.results["scores"]]


def checks(loaded: dict) -> str:
    """The comparisons STUDY.md's text quotes, each from the same code as the tables."""
    warm, drzero, sr1 = loaded["Base (warm start)"], loaded["Dr. Zero"], loaded["Search-R1"]
    untrained = load_run(SUITE / "runs" / UNTRAINED)
    wiki = stats.paired(sr1.rows, warm.rows)["2wikimultihopqa"]["cover_em"]
    vs_dz = stats.paired(sr1.rows, drzero.rows)["avg7"]["cover_em"]
    vs_untrained = stats.paired(warm.rows, untrained.rows)["avg7"]["cover_em"]
    answered = {t: sum(bool(x.get("prediction")) for x in loaded[t].trajectories) / len(loaded[t].trajectories) for t in loaded}
    invalid = {t: loaded[t].results["stats"]["invalid_turns_per_question"] for t in loaded}
    crossfit = [json.loads(line) for line in (STUDY / "crossfit" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [m for m in crossfit if 40 <= m["step"] <= 43]
    bank = json.loads((STUDY / "replay" / "replay.json").read_text())
    coupled = bank["variants"]["coupled"]
    sheet = [json.loads(line) for line in (STUDY / "replay" / "sheet.jsonl").read_text().splitlines() if line.strip()]
    fresh = [r for r in sheet if "copied_from" not in r]
    verdicts = sum(r["max_tokens"] == 8 for r in fresh)
    same = [
        (a, b, same_trajectories(loaded[a], loaded[b]))
        for a, b in (("CrossFit", "Dr. Zero"), ("MSV", "Base (warm start)"), ("MSV+CrossFit", "Base (warm start)"))
    ]
    return "\n".join(
        [
            row(["comparison", "value"]),
            row(["---", "---"]),
            *(row([f"{a}: trajectories byte-identical to {b}'s", f"{n:,} of 1,325"]) for a, b, n in same),
            row(["Search-R1 - warm start, 2WikiMultihopQA Cover-EM (p)", f"{interval(wiki)} ({p_text(wiki['p'])})"]),
            row(["Search-R1 - Dr. Zero, avg7 (p)", f"{interval(vs_dz)} ({p_text(vs_dz['p'])})"]),
            row(["warm start - untrained SmolLM2-135M (scores only), avg7 (p)", f"{interval(vs_untrained)} ({p_text(vs_untrained['p'])})"]),
            row(
                [
                    "questions answered: Search-R1, warm start",
                    f"{100 * answered['Search-R1']:.1f}%, {100 * answered['Base (warm start)']:.1f}%",
                ]
            ),
            row(
                [
                    "invalid turns a question: Search-R1, warm start",
                    f"{invalid['Search-R1']:.2f}, {invalid['Base (warm start)']:.2f}",
                ]
            ),
            row(
                [
                    f"replay bank ({bank['bank']} questions): resolved pairs / pairs (coverage), T_P",
                    f"{coupled['resolved_pairs']} / {coupled['pairs']} ({coupled['coverage']:.3f}), {coupled['T_P']:.3f}",
                ]
            ),
            row(
                ["replay sheet: prompts answered anew (not copied from the audit's sheets), of them verdicts", f"{len(fresh)}, {verdicts}"]
            ),
            row(
                [
                    "CrossFit training steps 40-43: wall (rollout + update), CPU time",
                    f"{sum(m['rollout_s'] + m['update_s'] for m in steps):,.0f} s, {sum(m['cpu_s'] for m in steps):,.0f} s "
                    f"(step 43 alone: {steps[-1]['rollout_s'] + steps[-1]['update_s']:.0f} s, {steps[-1]['cpu_s']:.0f} s)",
                ]
            ),
        ]
    )


def judges() -> str:
    """The reference judge against the sheet judge on the same audited questions (`cfbench audit compare-judges`)."""
    folders = [STUDY / folder for _, folder in TREATMENTS.values() if folder not in (None, "search-r1")]
    report = judges_agree.compare([f.relative_to(SUITE.parents[1]) for f in folders], "reference", "sheet:llm-annotators")
    return "\n".join(judges_agree.table(report).splitlines()[2:])


def changes(loaded: dict) -> str:
    """What each trained treatment's fixed1325 run changed against the warm start's, question by question."""
    warm = loaded["Base (warm start)"]
    before = {t["id"]: t for t in warm.trajectories}
    score = {r["id"]: r["scores"]["cover_em"] for r in warm.rows}
    out = [
        row(["treatment", "trajectories changed", "predictions changed", "gained (Cover-EM)", "lost (Cover-EM)", "answered"]),
        row(["---"] * 6),
        row(["Base (warm start)", "", "", "", "", f"{_answered(warm):.1%}"]),
    ]
    for treatment, run in loaded.items():
        if run is warm:
            continue
        mine = {r["id"]: r["scores"]["cover_em"] for r in run.rows}
        out.append(
            row(
                [
                    treatment,
                    f"{sum(t != before[t['id']] for t in run.trajectories):,} of {len(run.trajectories):,}",
                    f"{sum(t.get('prediction') != before[t['id']].get('prediction') for t in run.trajectories):,}",
                    sum(mine[q] > score[q] for q in mine),
                    sum(mine[q] < score[q] for q in mine),
                    f"{_answered(run):.1%}",
                ]
            )
        )
    return "\n".join(out)


def _answered(run) -> float:
    return sum(bool(t.get("prediction")) for t in run.trajectories) / len(run.trajectories)


def admissions() -> str:
    """Per self-evolution run: questions admitted by round, and what each judge resolved (pooled rates: the sheet judge's)."""
    out = [
        row(["treatment", "admitted (rounds 1 / 2 / 3)", "judge", "resolved questions", "resolved pairs / pairs", "coverage by round"]),
        row(["---"] * 6),
    ]
    for treatment, (_, folder) in TREATMENTS.items():
        if folder in (None, "search-r1"):
            continue
        for judge in ("reference", SHEET):
            audit = json.loads((STUDY / folder / "judged" / judge / "audit.json").read_text())
            rounds, pooled = audit["rounds"], audit["overall"]
            admitted = f"{pooled['questions']} of {sum(r['tasks'] for r in rounds)} ({' / '.join(str(r['questions']) for r in rounds)})"
            out.append(
                row(
                    [
                        treatment if judge == "reference" else "",
                        admitted if judge == "reference" else "",
                        judge.replace("sheet-", "sheet:"),
                        pooled["resolved_questions"],
                        f"{pooled['resolved_pairs']} / {pooled['pairs']}",
                        " / ".join("-" if r["coverage"] is None else f"{r['coverage']:.2f}" for r in rounds),
                    ]
                )
            )
    return "\n".join(out)


def pooled() -> str:
    """The sheet judge's pooled rates per run, over its resolved pairs."""
    out = [row(["treatment", "T_P", "T_S", "A", "F", "L"]), row(["---"] * 6)]
    for treatment, (_, folder) in TREATMENTS.items():
        if folder in (None, "search-r1"):
            continue
        o = json.loads((STUDY / folder / "judged" / SHEET / "audit.json").read_text())["overall"]
        out.append(row([treatment, *("-" if not o["resolved_pairs"] else f"{o[k]:.2f}" for k in ("T_P", "T_S", "A", "F", "L"))]))
    return "\n".join(out)


def training() -> str:
    """Per self-evolution run, from its metrics.jsonl: how often the main solver had something to learn from."""
    out = [
        row(
            [
                "treatment",
                "solver steps with admitted questions",
                "of those, a non-zero main-solver loss (steps)",
                "mean agreement by phase",
                "proposer reward by phase",
                "step seconds: proposer, solver",
                "round-2 proposer CPU-hours",
            ]
        ),
        row(["---"] * 7),
    ]
    for treatment, (_, folder) in TREATMENTS.items():
        if folder in (None, "search-r1"):
            continue
        metrics = [json.loads(line) for line in (STUDY / folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
        solver = [m for m in metrics if m["phase"] == "solver" and m["admitted"] > 0]
        moved = [m["step"] for m in solver if m["losses"].get("main")]
        phases: dict[tuple, list[dict]] = {}
        for m in metrics:
            phases.setdefault((m["round"], m["phase"]), []).append(m)
        agreement = [_mean([m["agreement"] for m in ms if m["agreement"] is not None]) for ms in phases.values()]
        reward = [_mean([m["proposer_reward"] for m in ms if m.get("proposer_reward") is not None]) for ms in phases.values()]
        out.append(
            row(
                [
                    treatment,
                    f"{len(solver)} of {sum(m['phase'] == 'solver' for m in metrics)}",
                    f"{len(moved)} ({', '.join(map(str, moved)) or 'none'})",
                    _span(agreement),
                    _span(reward),
                    ", ".join(_seconds([m for m in metrics if m["phase"] == phase]) for phase in ("proposer", "solver")),
                    f"{sum(m['cpu_s'] for m in phases[2, 'proposer']) / 3600:.2f}",
                ]
            )
        )
    return "\n".join(out)


def _seconds(metrics: list[dict]) -> str:
    spent = [m["rollout_s"] + m["update_s"] for m in metrics]
    return f"{min(spent):.0f}-{max(spent):.0f}"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _span(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{min(known):.2f}-{max(known):.2f}" if known else "-"


def search_r1() -> str:
    """Search-R1's training by blocks of 15 steps, from study/search-r1/metrics.jsonl (10 rollouts a step)."""
    metrics = [json.loads(line) for line in (STUDY / "search-r1" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rewarded = [(m["step"], round(m["reward"] * 10)) for m in metrics if m["reward"]]
    out = [row(["steps", "answered", "well-formed", "searches a rollout", "rollouts rewarded (step: count)", "s a step"]), row(["---"] * 6)]
    for start in range(0, len(metrics), 15):
        block = metrics[start : start + 15]
        steps = [m["step"] for m in block]
        out.append(
            row(
                [
                    f"{steps[0]}-{steps[-1]}",
                    f"{_mean([m['answered'] for m in block]):.2f}",
                    f"{_mean([m['well_formed'] for m in block]):.2f}",
                    f"{_mean([m['searches_per_rollout'] for m in block]):.2f}",
                    ", ".join(f"{step}: {n}" for step, n in rewarded if step in steps) or "none",
                    f"{_mean([m['rollout_s'] + m['update_s'] for m in block]):.0f}",
                ]
            )
        )
    total = sum(n for _, n in rewarded)
    out.append(row(["all", "", "", "", f"{total} of {10 * len(metrics)} rollouts, on {len(rewarded)} steps", ""]))
    return "\n".join(out)


def blocks() -> dict[str, str]:
    loaded = runs()
    return {
        "search_r1": search_r1(),
        "training": training(),
        "changes": changes(loaded),
        "admissions": admissions(),
        "pooled": pooled(),
        "judges": judges(),
        "results": results(loaded),
        "orderings": orderings(loaded),
        "round3": round3(),
        "cost": cost(),
        "replay": replay(),
        "status": status(loaded),
        "checks": checks(loaded),
    }


def render(text: str, generated: dict[str, str]) -> str:
    for name, table in generated.items():
        pattern = re.compile(rf"(<!-- generated: {name} -->\n).*?(\n<!-- end: {name} -->)", re.DOTALL)
        if not pattern.search(text):
            raise SystemExit(f"STUDY.md: no block <!-- generated: {name} --> ... <!-- end: {name} -->; add one where the table goes")
        text = pattern.sub(lambda m, table=table: m.group(1) + table + m.group(2), text)
    return text


def main(argv: list[str]) -> int:
    path = SUITE / "STUDY.md"
    text = path.read_text(encoding="utf-8")
    generated = blocks()
    again = render(text, generated)
    if argv == ["--write"]:
        path.write_text(again, encoding="utf-8")
        return 0
    if argv == ["--check"]:
        stale = [name for name in generated if render(text, {name: generated[name]}) != text]
        if stale:
            print(f"{path}: generated tables {', '.join(stale)} differ from the records; run {sys.argv[0]} --write", file=sys.stderr)
            return 1
        return 0
    print(__doc__.split("\n")[0], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
