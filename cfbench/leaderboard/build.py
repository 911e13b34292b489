"""`cfbench leaderboard build`: a suite's leaderboard as a pure function of its stored runs.

The leaderboard is first a dict (written as results.json); README.md, results.csv, results.tex and
index.html are all rendered from that dict, so every published number has one source.
"""

from __future__ import annotations

from pathlib import Path

from cfbench.harness import stats
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


def leaderboard(suite: str, runs: list[Run]) -> dict:
    """Comparable groups, the first one ranked as the leaderboard and the rest set apart with their reasons."""
    parts = comparable.partition(runs, lambda run: comparable.key(run.results))
    tables = [_table(k, members, comparable.differences(k, parts[0][0]) if i else []) for i, (k, members) in enumerate(parts)]
    return {
        "suite": suite,
        "metric": RANK_METRIC,
        "rank_by": RANK_BY,
        "bootstrap": stats.describe(),
        "tables": tables,
        "reported": reported(suite),
    }


def outputs(suite_dir: Path) -> tuple[dict, dict[str, str]]:
    """A suite's leaderboard and every file it renders to (name -> text), from suite_dir/runs; nothing is written.

    Besides the tables, each run that kept its trajectories gets its question-by-question page,
    questions/<run id>.html, which index.html links to.
    """
    runs = stored_runs(suite_dir)
    board = leaderboard(suite_dir.name, runs)
    return board, {
        "results.json": json_text(board),
        "README.md": markdown(board),
        "results.csv": csv_table(board),
        "results.tex": latex_table(board),
        "index.html": page(board),
    } | {question_file(run.id): question_page(run) for run in runs if run.trajectories is not None}


def build(suite_dirs: list[Path]) -> list[dict]:
    """Regenerate every suite's output files from its stored runs: all suites or, if any run is refused, none."""
    rendered = [outputs(suite_dir) for suite_dir in suite_dirs]  # every check runs before anything is written
    for suite_dir, (_, files) in zip(suite_dirs, rendered):
        suite_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (suite_dir / name).parent.mkdir(exist_ok=True)
            write_atomic(suite_dir / name, text)
        for name in leftover_pages(suite_dir, files):
            (suite_dir / name).unlink()
    return [board for board, _ in rendered]


def leftover_pages(suite_dir: Path, files: dict[str, str]) -> list[str]:
    """Question pages in suite_dir that outputs() no longer renders: those of runs no longer stored."""
    return [question_file(p.stem) for p in sorted((suite_dir / QUESTIONS).glob("*.html")) if question_file(p.stem) not in files]


def _table(key: dict, runs: list[Run], set_apart_because: list[str]) -> dict:
    entries = sorted((_entry(run) for run in runs), key=lambda e: (-_rank_value(e), e["name"], e["id"]))
    by_id = {run.id: run for run in runs}
    best = by_id[entries[0]["id"]]
    for rank, entry in enumerate(entries, start=1):
        entry["rank"] = rank
        entry["vs_best"] = (
            None
            if rank == 1
            else {
                name: {k: v for k, v in result[RANK_METRIC].items() if k in ("delta", "lo", "hi", "p")}
                for name, result in stats.paired(by_id[entry["id"]].rows, best.rows).items()
            }
        )
    names = list(entries[0]["scores"])
    columns = {"benchmarks": [n for n in names if n not in GROUPS], "groups": [n for n in names if n in GROUPS]}
    return {
        "comparable_on": key,
        "set_apart_because": set_apart_because,
        **columns,
        "best": {n: max(e["scores"][n][RANK_METRIC]["value"] for e in entries) for n in names} if len(entries) > 1 else {},
        "runs": entries,
    }


def _entry(run: Run) -> dict:
    spread = stats.intervals(run.rows)
    scores, model = run.results["scores"], run.results["model"]
    return {
        "id": run.id,
        **run.labels,
        "model": model.get("model"),
        "weights_sha256": model.get("weights_sha256"),
        "engine": model.get("engine"),
        "wall_time_s": run.results.get("wall_time_s"),
        "scores_only": run.trajectories is None,
        "scores": {
            name: {m: {"value": round(scores[name][m], stats.DIGITS), **spread[name][m]} for m in METRICS} | {"n": scores[name]["n"]}
            for name in spread
        },  # in the suite's benchmark order, then the averages
    }


def _rank_value(entry: dict) -> float:
    """avg7 Cover-EM; a suite without all seven benchmarks ranks by the mean of its benchmarks instead."""
    scores = entry["scores"]
    if RANK_BY in scores:
        return scores[RANK_BY][RANK_METRIC]["value"]
    values = [s[RANK_METRIC]["value"] for name, s in scores.items() if name not in GROUPS]
    return sum(values) / len(values)
