"""`cfbench leaderboard export` read back by lm-evaluation-harness itself: its results loading, make_table, group aggregation.

The run has benchmarks of unequal size, so a size-weighted group (lm-eval's default) would differ from cfbench's
unweighted averages and its pooled standard error from the one written.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from types import SimpleNamespace

from click.testing import CliRunner
from datasets import load_dataset
from lm_eval.api.group import Group
from lm_eval.config.group import AggMetricConfig
from lm_eval.utils import get_latest_filename, get_results_filenames, get_sample_results_filenames, hash_string, make_table

from cfbench.cli import main
from cfbench.harness.metrics import BENCHMARKS, GROUPS, METRICS
from cfbench.harness.protocol import user_prompt
from cfbench.leaderboard.lmeval import TASK_VERSION
from tests.leaderboard_runs import write_run

SIZES = dict(zip(BENCHMARKS, [12, 9, 15, 7, 11, 20, 5]))
ACCURACY = dict(zip(BENCHMARKS, [0.6, 0.5, 0.7, 0.3, 0.2, 0.4, 0.5]))


class _Leaves(Group):
    """lm-eval's Group with its leaf tasks named rather than built (aggregate reads only their names and metrics)."""

    def __init__(self, name: str, leaves: list[str]) -> None:
        super().__init__(name=name, aggregate_metric_list=[AggMetricConfig(metric=m, weight_by_size=False) for m in METRICS])
        self.leaves = leaves

    def get_all_tasks(self, recursive: bool = True):
        return [SimpleNamespace(task_name=t) for t in self.leaves]


def _exported(tmp_path) -> tuple[dict, dict]:
    ids = [(b, f"{b}-{i}") for b in BENCHMARKS for i in range(SIZES[b])]
    run = write_run(tmp_path / "run", ACCURACY, seed=3, ids=ids, model="m")
    (run / "segments.jsonl").write_text(json.dumps({"started": "2026-01-02T03:04:05+00:00", "ended": "2026-01-02T04:00:00+00:00"}) + "\n")
    out = tmp_path / "lmeval" / "m" / "results_2026-01-02T03-04-05.000000.json"  # where lm-eval's tracker writes its own
    out.parent.mkdir(parents=True)
    result = CliRunner().invoke(main, ["leaderboard", "export", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((run / "results.json").read_text()), json.loads(out.read_text())


def test_lmeval_loads_the_export_and_prints_every_task_once_under_its_groups(tmp_path):
    scores, _ = _exported(tmp_path)
    files = [str(p.relative_to(tmp_path)) for p in (tmp_path / "lmeval").rglob("*")]
    latest = get_latest_filename(get_results_filenames(files))  # how lm-eval's tracker finds a model's results
    loaded = load_dataset("json", data_files=str(tmp_path / latest), split="train")[0]  # and how it loads them
    names = list(BENCHMARKS) + list(GROUPS)
    for name in names:
        for m in METRICS:
            assert loaded["results"][f"cfbench_{name}"][f"{m},none"] == scores["scores"][name][m]
    assert loaded["date"] == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert loaded["results"]["cfbench_avg7"]["sample_len"] == sum(SIZES.values())

    table = make_table(loaded)
    rows = [line.split("|")[1].rstrip() for line in table.splitlines()[2:] if line.split("|")[1].strip()]
    assert sorted(r.strip(" -") for r in rows) == sorted(names)  # every task and group once, none twice
    assert rows[0] == "avg7" and " - multi_hop" in rows and "  - hotpotqa" in rows  # nested: avg7 > multi_hop > benchmarks
    cover = {r.split("|")[1].strip(" -"): r.split("|") for r in table.splitlines()[2:] if "cover_em" in r}
    for name in names:
        version, nshot, value = (cover[name][i].strip() for i in (2, 4, 7))
        assert value == f"{scores['scores'][name]['cover_em']:.4f}" and (version, nshot) == (str(TASK_VERSION), "0")
    groups = make_table(loaded, "groups")
    assert {line.split("|")[1].strip(" -") for line in groups.splitlines()[2:] if line.split("|")[1].strip()} == set(GROUPS)


def test_group_numbers_are_lmeval_own_aggregation_of_the_tasks(tmp_path):
    _, exported = _exported(tmp_path)
    tasks = {f"cfbench_{b}": exported["results"][f"cfbench_{b}"] for b in BENCHMARKS}
    for group, members in GROUPS.items():
        mine = exported["groups"][f"cfbench_{group}"]
        theirs = _Leaves(f"cfbench_{group}", [f"cfbench_{b}" for b in members]).aggregate(tasks)
        assert set(theirs) == set(mine)
        for key, value in theirs.items():
            if key.endswith(",none"):
                assert math.isclose(mine[key], value, rel_tol=1e-12), (group, key)
        assert mine["sample_len"] == theirs["sample_len"] and mine["sample_count"] == theirs["sample_count"]
        assert exported["versions"][f"cfbench_{group}"] == str(exported["versions"]["cfbench_nq"])  # as lm-eval types them
        assert exported["n-shot"][f"cfbench_{group}"] == 0
    assert exported["group_subtasks"]["cfbench_avg7"] == ["cfbench_multi_hop", "cfbench_single_hop"]
    assert all(re.fullmatch(r"cfbench_\w+", t) for t in exported["group_subtasks"]["cfbench_multi_hop"])


def test_the_export_writes_each_tasks_samples_as_lmeval_log_samples_does(tmp_path):
    """Named as lm-eval's tracker names them beside the results file, found by its sample-file lookup, loaded by datasets
    as its loaders do; every row carries lm-eval's fields, its hashes computed as lm-eval computes them, and the run's
    own prediction and scores."""
    _exported(tmp_path)
    files = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "lmeval").rglob("*"))
    found = get_sample_results_filenames(files)
    assert sorted(found) == sorted(f"lmeval/m/samples_cfbench_{b}_2026-01-02T03-04-05.000000.jsonl" for b in BENCHMARKS)
    trajectories = {}
    for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines():
        row = json.loads(line)
        trajectories[row["id"]] = row
    for name in found:
        bench = re.fullmatch(r"lmeval/m/samples_cfbench_(\w+?)_2026.*", name).group(1)
        rows = load_dataset("json", data_files=str(tmp_path / name), split="train").to_list()
        assert [r["doc_id"] for r in rows] == list(range(SIZES[bench]))
        for row in rows:
            run_row = trajectories[row["doc"]["id"]]
            doc = {"id": run_row["id"], "question": run_row["question"], "golden_answers": run_row["golden_answers"]}
            assert row["doc"] == doc and row["target"] == run_row["golden_answers"][0]
            assert row["filtered_resps"] == [run_row["prediction"]] and row["resps"] == [[run_row["prediction"]]]
            assert row["arguments"]["gen_args_0"]["arg_0"] == user_prompt(run_row["question"]) and row["filter"] == "none"
            assert row["doc_hash"] == hash_string(json.dumps(doc, indent=2, ensure_ascii=False))
            assert row["prompt_hash"] == hash_string(row["arguments"]["gen_args_0"]["arg_0"])
            assert row["target_hash"] == hash_string(row["target"])
            assert row["metrics"] == list(METRICS) and {m: row[m] for m in METRICS} == run_row["scores"]
