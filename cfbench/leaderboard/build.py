"""`cfbench leaderboard build`: a suite's leaderboard as a pure function of its stored runs.

The leaderboard is first a dict (written as results.json); README.md, results.csv, results.tex and
index.html are all rendered from that dict, so every published number has one source.
"""

from __future__ import annotations

import json
from pathlib import Path

from cfbench.harness import stats
from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import json_text, write_atomic
from cfbench.harness.metrics import GROUPS, METRICS
from cfbench.leaderboard import comparable
from cfbench.leaderboard.page import page
from cfbench.leaderboard.question_page import QUESTIONS, question_file, question_page
from cfbench.leaderboard.reported import reported
from cfbench.leaderboard.store import Run, stored_runs
from cfbench.leaderboard.tables import csv_table, latex_table, markdown

RANK_METRIC = "cover_em"
RANK_BY = "avg7"
FORMAT = "cfbench-leaderboard-v2"  # v2: shared ranks from Holm-corrected paired tests, identical runs in one row, a stated reference
UNITS = "fraction"  # every score in results.json and results.csv is a fraction of questions (0-1); the tables show percent
SETTINGS = "leaderboard.json"  # per suite, beside runs/: {"reference": run id}, written by `build --reference`


def leaderboard(suite: str, runs: list[Run], reference: str | None = None) -> dict:
    """Comparable groups of runs with stored predictions, the first ranked and the rest set apart with their reasons;
    runs stored with scores only listed apart, neither ranked nor tested."""
    verified = [run for run in runs if run.trajectories is not None]
    parts = comparable.partition(verified, lambda run: comparable.key(run.results))
    tables = [_table(k, members, comparable.differences(k, parts[0][0]) if i else [], reference) for i, (k, members) in enumerate(parts)]
    ranked_key = parts[0][0] if parts else None
    only = sorted((run for run in runs if run.trajectories is None), key=lambda run: (run.labels["name"], run.id))
    return {
        "format": FORMAT,
        "suite": suite,
        "metric": RANK_METRIC,
        "units": UNITS,
        "rank_by": RANK_BY,
        "groups": {name: list(members) for name, members in GROUPS.items()},
        "bootstrap": stats.describe(),
        "reference": reference,
        "tables": tables,
        "scores_only": [
            _entry([run]) | {"differs_from_ranked": comparable.differences(comparable.key(run.results), ranked_key) if ranked_key else []}
            for run in only
        ],
        "reported": reported(suite),
    }


def reference_of(suite_dir: Path, runs: list[Run], chosen: str | None = None) -> str | None:
    """The reference run's id: the one chosen (an id, id prefix or name), else the one suite_dir/leaderboard.json names."""
    where = "--reference"
    if chosen is None:
        where = str(suite_dir / SETTINGS)
        if not (suite_dir / SETTINGS).is_file():
            return None
        chosen = json.loads((suite_dir / SETTINGS).read_text(encoding="utf-8")).get("reference")
        if chosen is None:
            return None
    found = [run for run in runs if run.trajectories is not None and (run.id.startswith(chosen) or run.labels["name"] == chosen)]
    if len(found) != 1:
        raise CfbenchError(
            f"{where}: reference {chosen!r} names {len(found)} stored runs with predictions in {suite_dir / 'runs'}; "
            "give one run's id (or a unique prefix) or its exact name"
        )
    return found[0].id


def outputs(suite_dir: Path, reference: str | None = None) -> tuple[dict, dict[str, str]]:
    """A suite's leaderboard and every file it renders to (name -> text), from suite_dir/runs; nothing is written.

    Besides the tables, each run that kept its trajectories gets its question-by-question page,
    questions/<run id>.html, which index.html links to. The reference is `reference` when given,
    else the one suite_dir/leaderboard.json names, else none.
    """
    runs = stored_runs(suite_dir)
    board = leaderboard(suite_dir.name, runs, reference_of(suite_dir, runs, reference))
    return board, {
        "results.json": json_text(board),
        "README.md": markdown(board),
        "results.csv": csv_table(board),
        "results.tex": latex_table(board),
        "index.html": page(board),
    } | {question_file(run.id): question_page(run) for run in runs if run.trajectories is not None}


def build(suite_dirs: list[Path], reference: str | None = None) -> list[dict]:
    """Regenerate every suite's output files from its stored runs: all suites or, if any run is refused, none.

    A reference given here is recorded in the suite's leaderboard.json, so that rescore rebuilds the same tables.
    """
    rendered = [outputs(suite_dir, reference) for suite_dir in suite_dirs]  # every check runs before anything is written
    for suite_dir, (board, files) in zip(suite_dirs, rendered):
        suite_dir.mkdir(parents=True, exist_ok=True)
        if reference is not None:
            write_atomic(suite_dir / SETTINGS, json_text({"reference": board["reference"]}))
        for name, text in files.items():
            (suite_dir / name).parent.mkdir(exist_ok=True)
            write_atomic(suite_dir / name, text)
        for name in leftover_pages(suite_dir, files):
            (suite_dir / name).unlink()
    return [board for board, _ in rendered]


def leftover_pages(suite_dir: Path, files: dict[str, str]) -> list[str]:
    """Question pages in suite_dir that outputs() no longer renders: those of runs no longer stored."""
    return [question_file(p.stem) for p in sorted((suite_dir / QUESTIONS).glob("*.html")) if question_file(p.stem) not in files]


def _table(key: dict, runs: list[Run], set_apart_because: list[str], reference: str | None) -> dict:
    """One comparable group: runs with identical predictions share a row; ranks and bold come from paired tests."""
    groups = _identical(runs)
    rows = [_entry(group) for group in groups]
    names = list(rows[0]["scores"])
    ranked_by = RANK_BY if RANK_BY in names else next((n for n in names if n in GROUPS), names[0])
    pairs = {(i, j): stats.paired(groups[i][0].rows, groups[j][0].rows) for i in range(len(rows)) for j in range(i + 1, len(rows))}
    tests = [(i, j, pairs[i, j][ranked_by][RANK_METRIC]) for i, j in pairs]
    adjusted = stats.holm([t["p"] for _, _, t in tests])
    beaten_by: dict[int, list[int]] = {i: [] for i in range(len(rows))}
    pairwise = []
    for (i, j, t), p_holm in zip(tests, adjusted):
        if p_holm < stats.ALPHA:
            beaten_by[j if t["delta"] > 0 else i].append(i if t["delta"] > 0 else j)
        pairwise.append(
            {"a": rows[i]["id"], "b": rows[j]["id"], **{k: t[k] for k in ("delta", "lo", "hi", "p")}, "p_holm": round(p_holm, 4)}
        )
    ref = next((i for i, group in enumerate(groups) if any(run.id == reference for run in group)), None)
    for i, row in enumerate(rows):
        row["rank"] = 1 + sum(len(groups[k]) for k in beaten_by[i])
        row["significantly_below"] = sorted(rows[k]["id"] for k in beaten_by[i])
        row["reference"] = i == ref
        row["vs_reference"] = (
            None
            if ref is None or i == ref
            else {
                name: {k: v for k, v in result[RANK_METRIC].items() if k in ("delta", "lo", "hi", "p")}
                for name, result in stats.paired(groups[i][0].rows, groups[ref][0].rows).items()
            }
        )
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["rank"], -rows[i]["scores"][ranked_by][RANK_METRIC]["value"], rows[i]["label"]))
    return {
        "comparable_on": key,
        "set_apart_because": set_apart_because,
        "benchmarks": [n for n in names if n not in GROUPS],
        "groups": [n for n in names if n in GROUPS],
        "ranked_by": ranked_by,
        "reference": None if ref is None else rows[ref]["id"],
        "bold": {name: _significantly_best(rows, pairs, name) for name in names},
        "runs": [rows[i] for i in order],
        "pairwise": pairwise,
    }


def _identical(runs: list[Run]) -> list[list[Run]]:
    """Runs grouped by their predictions (byte for byte, question by question), each group in name order."""
    by_predictions: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda run: (run.labels["name"], run.id)):
        predictions = json_text(sorted([row["id"], row.get("prediction")] for row in run.trajectories))
        by_predictions.setdefault(predictions, []).append(run)
    return list(by_predictions.values())


def _significantly_best(rows: list[dict], pairs: dict, name: str) -> str | None:
    """The row whose value on this column is significantly above every other row's (Holm over those tests), if any."""
    values = [row["scores"][name][RANK_METRIC]["value"] for row in rows]
    top = max(range(len(rows)), key=values.__getitem__)
    if len(rows) < 2 or values.count(values[top]) > 1:
        return None
    tests = [pairs[min(top, k), max(top, k)][name][RANK_METRIC]["p"] for k in range(len(rows)) if k != top]
    return rows[top]["id"] if all(p < stats.ALPHA for p in stats.holm(tests)) else None


def _entry(runs: list[Run]) -> dict:
    """A row: the runs that gave these predictions (one, or several that gave the same) and their scores."""
    run = runs[0]
    spread = stats.intervals(run.rows)
    scores = run.results["scores"]
    return {
        "id": run.id,
        "label": " = ".join(r.labels["name"] for r in runs),
        "identical_predictions": len(runs) > 1,
        "members": [_member(r) for r in runs],
        "scores": {
            name: {m: {"value": round(scores[name][m], stats.DIGITS), **spread[name][m]} for m in METRICS} | {"n": scores[name]["n"]}
            for name in spread
        },  # in the suite's benchmark order, then the averages
    }


def _member(run: Run) -> dict:
    model = run.results["model"]
    return {
        "id": run.id,
        "name": run.labels["name"],
        "treatment": run.labels["treatment"],
        "size": run.labels["scale"],
        "config": run.labels.get("config", ""),
        "model": model.get("model"),
        "weights_sha256": model.get("weights_sha256"),
        "engine": model.get("engine"),
        "wall_time_s": run.results.get("wall_time_s"),
    }
