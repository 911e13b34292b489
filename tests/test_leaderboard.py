"""The leaderboard: content-addressed storage, byte-identical builds, the comparability guard,
bootstrap statistics, `cfbench compare` and the lm-eval export. Runs are synthetic (tests/leaderboard_runs.py)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness import stats
from cfbench.harness.evaluate import evaluate
from cfbench.harness.metrics import BENCHMARKS, GROUPS, METRICS
from cfbench.harness.protocol import Knobs
from cfbench.harness.suite import load_suite
from cfbench.leaderboard.build import build
from cfbench.leaderboard.store import load_run
from leaderboard_runs import RETRIEVER, write_run
from scripted import ScriptedBackend, question_of

ACCURACY = {"nq": 0.45, "triviaqa": 0.6, "popqa": 0.35, "hotpotqa": 0.3, "2wikimultihopqa": 0.3, "musique": 0.1, "bamboogle": 0.2}
WORSE = {b: v / 2 for b, v in ACCURACY.items()}
OUTPUTS = ("README.md", "results.csv", "results.json", "results.tex", "index.html")
REPO = Path(__file__).resolve().parents[1]


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, [line for line in result.stderr.splitlines() if line.strip()]


def add(root, run, *labels):
    code, _, lines = cli("leaderboard", "add", run, "--root", root, *labels)
    assert code == 0, lines
    return lines


def test_add_is_content_addressed_and_builds_are_byte_identical(tmp_path):
    root = tmp_path / "lb"
    strong = write_run(tmp_path / "strong", ACCURACY, seed=1, model="strong")
    weak = write_run(tmp_path / "weak", WORSE, seed=2, model="weak")
    assert add(root, strong, "--treatment", "CrossFit", "--scale", "135M")[0].startswith("stored: ")
    assert add(root, strong)[0].startswith("already stored: ")  # same content, no labels asked: nothing changes
    add(root, weak, "--name", "weak run")
    entries = sorted((root / "fixed1325" / "runs").iterdir())
    assert len(entries) == 2 and {p.name for p in entries} == {load_run(strong).id, load_run(weak).id}

    code, _, lines = cli("leaderboard", "add", strong, "--root", root, "--name", "other")
    assert code == 2 and len(lines) == 1 and "already stored with labels" in lines[0]

    code, _, lines = cli("leaderboard", "build", "--root", root)
    assert code == 0 and lines == [f"{root / 'fixed1325'}: 2 runs"]
    first = {name: (root / "fixed1325" / name).read_bytes() for name in OUTPUTS}
    copy = tmp_path / "copy" / "fixed1325"
    shutil.copytree(root / "fixed1325" / "runs", copy / "runs")
    build([copy])
    build([root / "fixed1325"])
    for name in OUTPUTS:
        assert (root / "fixed1325" / name).read_bytes() == first[name] == (copy / name).read_bytes(), name

    board = json.loads(first["results.json"])
    assert board["bootstrap"]["seed"] == stats.SEED and board["bootstrap"]["resamples"] == stats.RESAMPLES
    (table,) = board["tables"]
    assert [r["label"] for r in table["runs"]] == ["strong", "weak run"] and [r["rank"] for r in table["runs"]] == [1, 2]
    assert table["runs"][0]["members"][0]["treatment"] == "CrossFit" and table["runs"][0]["members"][0]["size"] == "135M"
    assert table["benchmarks"] == list(BENCHMARKS) and table["groups"] == list(GROUPS)
    stored = json.loads((root / "fixed1325" / "runs" / table["runs"][1]["id"] / "results.json").read_text())
    for name, s in table["runs"][1]["scores"].items():
        for m in METRICS:
            assert s[m]["value"] == round(stored["scores"][name][m], 4)
            assert s[m]["lo"] <= s[m]["value"] <= s[m]["hi"]
    # Strong halves weak's accuracy on 40 questions a benchmark: significantly above it on the average, hence bold there.
    assert table["bold"]["avg7"] == table["runs"][0]["id"] and table["pairwise"][0]["p_holm"] < stats.ALPHA
    assert board["format"] == "cfbench-leaderboard-v2" and board["units"] == "fraction" and board["reference"] is None
    readme = first["README.md"].decode()
    v = table["runs"][0]["scores"]["avg7"]["cover_em"]
    assert f"**{100 * v['value']:.1f} [{100 * v['lo']:.1f}, {100 * v['hi']:.1f}]**" in readme
    assert "multi-hop: the mean of the benchmark means of HotpotQA, 2WikiMultihopQA, MuSiQue, Bamboogle." in readme
    assert "results.json and results.csv hold the same values as fractions (0-1)" in readme

    rows = list(csv.DictReader(first["results.csv"].decode().splitlines()))
    assert [r["name"] for r in rows] == ["strong", "weak run"] and {r["units"] for r in rows} == {"fraction of questions (0-1)"}
    assert float(rows[1]["avg7.cover_em"]) == table["runs"][1]["scores"]["avg7"]["cover_em"]["value"]
    assert rows[1]["avg7.cover_em.vs_reference.p"] == ""  # no reference chosen
    assert "\\textbf{" in first["results.tex"].decode() and "\\begin{tabular}" in first["results.tex"].decode()


def test_a_record_written_by_eval_is_stored_and_ranked(tmp_path, bm25):
    """The leaderboard reads what `cfbench eval` writes (a scripted policy stands in for the model)."""
    policy = ScriptedBackend(lambda context: f"<answer> {question_of(context).split()[0]} </answer>")
    results = evaluate(load_suite("mini"), policy, bm25, Knobs(), tmp_path / "run", batch_size=16)
    root = tmp_path / "lb"
    add(root, tmp_path / "run", "--name", "scripted")
    entry = root / "mini" / "runs" / load_run(tmp_path / "run").id
    assert json.loads((entry / "results.json").read_text()) == results
    (table,) = build([root / "mini"])[0]["tables"]
    assert table["runs"][0]["label"] == "scripted" and table["runs"][0]["scores"]["avg7"]["em"]["value"] == round(
        results["scores"]["avg7"]["em"], 4
    )
    assert table["comparable_on"]["retriever"]["index_sha256"] == results["retriever"]["index_sha256"]
    assert "corpus" not in table["comparable_on"]["retriever"]  # a path: where the corpus was, not what it holds


def test_guard_sets_apart_what_differs_and_keeps_engine_settings_together(tmp_path):
    root = tmp_path / "lb"
    add(root, write_run(tmp_path / "a", ACCURACY, seed=1, model="a"))
    # Engine, threads and batch size are what is compared, so they never split a table.
    add(root, write_run(tmp_path / "b", WORSE, seed=2, model="b", engine="vllm", threads=8, batch_size=64))
    add(
        root,
        write_run(
            tmp_path / "c",
            ACCURACY,
            seed=3,
            model="c",
            knobs={"topk": 5, "max_searches": 4, "max_new_tokens": 500, "max_obs_tokens": 500, "max_context_tokens": 4096},
        ),
    )
    # The same index served from elsewhere is the same retriever; another index is not.
    add(root, write_run(tmp_path / "d", ACCURACY, seed=4, model="d", retriever={**RETRIEVER, "corpus": "/elsewhere/corpus.jsonl"}))
    add(root, write_run(tmp_path / "e", ACCURACY, seed=5, model="e", retriever={**RETRIEVER, "index_sha256": "2" * 64}))
    code, _, lines = cli("leaderboard", "build", "--root", root)
    assert code == 0 and lines[0] == f"{root / 'fixed1325'}: 5 runs"
    assert len(lines) == 3 and all(line.startswith("  set apart (") for line in lines[1:])
    assert any("c (" in line and "protocol.knobs.topk: 5 vs 3" in line for line in lines[1:])
    assert any("e (" in line and "retriever.index_sha256: " + "2" * 64 + " vs " + "1" * 64 in line for line in lines[1:])

    board = json.loads((root / "fixed1325" / "results.json").read_text())
    tables = {tuple(r["label"] for r in t["runs"]): t for t in board["tables"]}
    assert {r["label"] for r in board["tables"][0]["runs"]} == {"a", "b", "d"} and board["tables"][0]["set_apart_because"] == []
    assert tables[("c",)]["set_apart_because"] == ["protocol.knobs.topk: 5 vs 3"]
    assert tables[("e",)]["set_apart_because"] == [f"retriever.index_sha256: {'2' * 64} vs {'1' * 64}"]
    readme = (root / "fixed1325" / "README.md").read_text()
    assert (
        readme.count("## Set apart (") == 2 and "Set apart because (this group vs the ranked runs): protocol.knobs.topk: 5 vs 3." in readme
    )


def test_other_suite_hash_is_set_apart_and_an_unknown_metric_version_refused(tmp_path):
    root = tmp_path / "lb"
    add(root, write_run(tmp_path / "a", ACCURACY, seed=1, model="a"))
    add(root, write_run(tmp_path / "b", ACCURACY, seed=2, model="b", suite={"name": "fixed1325", "path": "x.jsonl", "sha256": "b" * 64}))
    (board,) = build([root / "fixed1325"])
    assert [len(t["runs"]) for t in board["tables"]] == [1, 1]
    assert board["tables"][1]["set_apart_because"] == [f"suite.sha256: {'b' * 64} vs {'a' * 64}"]
    # Scores are recomputed from predictions, which needs the metric version that made them.
    older = write_run(tmp_path / "c", ACCURACY, seed=3, model="c")
    for name in ("run.json", "results.json"):
        data = json.loads((older / name).read_text())
        data["metric_version"] = "cfbench-metrics-v0"
        (older / name).write_text(json.dumps(data))
    code, _, lines = cli("leaderboard", "add", older, "--root", root)
    assert code == 2 and len(lines) == 1 and "scored with metric version 'cfbench-metrics-v0'" in lines[0]


def test_compare_prints_deltas_and_refuses_incomparable_runs(tmp_path):
    strong = write_run(tmp_path / "strong", ACCURACY, seed=1, model="strong")
    weak = write_run(tmp_path / "weak", WORSE, seed=2, model="weak")
    code, out, _ = cli("compare", strong, weak)
    assert code == 0
    lines = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in out.splitlines() if line.count("│") > 7}
    expected = stats.paired(load_run(strong).rows, load_run(weak).rows)
    assert set(lines) == set(BENCHMARKS) | {"7-avg", "multi-hop", "single-hop"}
    n, a, b, delta, interval, p = lines["7-avg"]
    r = expected["avg7"]["cover_em"]
    assert (n, a, b, delta, p) == (str(r["n"]), f"{100 * r['a']:.1f}", f"{100 * r['b']:.1f}", f"{100 * r['delta']:+.1f}", f"{r['p']:.3f}")
    assert float(p) < 0.01 and interval == f"[{100 * r['lo']:+.1f}, {100 * r['hi']:+.1f}]"

    # A stored entry compares like its run directory.
    root = tmp_path / "lb"
    add(root, weak)
    assert cli("compare", strong, root / "fixed1325" / "runs" / load_run(weak).id)[1] == out

    topk = write_run(
        tmp_path / "topk",
        ACCURACY,
        seed=3,
        knobs={"topk": 5, "max_searches": 4, "max_new_tokens": 500, "max_obs_tokens": 500, "max_context_tokens": 4096},
    )
    code, _, lines = cli("compare", strong, topk)
    assert code == 2 and len(lines) == 1 and "are not comparable (protocol.knobs.topk: 3 vs 5)" in lines[0]
    disjoint = write_run(tmp_path / "disjoint", ACCURACY, seed=4, ids=[(b, f"other-{b}-{i}") for b in BENCHMARKS for i in range(40)])
    code, _, lines = cli("compare", strong, disjoint)
    assert code == 2 and len(lines) == 1 and "share no question ids" in lines[0]


def test_bad_runs_are_one_line_errors(tmp_path):
    root = tmp_path / "lb"
    code, _, lines = cli("leaderboard", "add", tmp_path / "nothing", "--root", root)
    assert code == 2 and len(lines) == 1 and "no results.json" in lines[0]
    edited = write_run(tmp_path / "edited", ACCURACY, seed=1)
    results = json.loads((edited / "results.json").read_text())
    results["scores"]["nq"]["cover_em"] += 0.1
    (edited / "results.json").write_text(json.dumps(results))
    code, _, lines = cli("leaderboard", "add", edited, "--root", root)
    assert code == 2 and len(lines) == 1 and "results.json says nq cover_em" in lines[0]
    partial = write_run(tmp_path / "partial", ACCURACY, seed=1)
    (partial / "trajectories.jsonl").write_text("".join((partial / "trajectories.jsonl").read_text().splitlines(True)[:-1]))
    code, _, lines = cli("leaderboard", "add", partial, "--root", root)
    assert code == 2 and len(lines) == 1 and "279 scored questions but suite 'fixed1325' has 280" in lines[0]

    good = write_run(tmp_path / "good", ACCURACY, seed=1)
    add(root, good)
    entry = root / "fixed1325" / "runs" / load_run(good).id
    (entry / "scores.jsonl").write_text((entry / "scores.jsonl").read_text().replace('"cover_em": 1.0', '"cover_em": 0.0', 1))
    code, _, lines = cli("leaderboard", "build", "--root", root)
    assert code == 2 and len(lines) == 1 and str(entry) in lines[0]


def test_lm_eval_export(tmp_path):
    run = write_run(tmp_path / "run", ACCURACY, seed=1, model="m")
    code, _, _ = cli("leaderboard", "export", run, "--out", tmp_path / "lmeval.json")
    assert code == 0
    data = json.loads((tmp_path / "lmeval.json").read_text())
    results = json.loads((run / "results.json").read_text())
    assert {"results", "configs", "versions", "n-samples", "config"} <= set(data)
    assert set(data["results"]) == {f"cfbench_{b}" for b in BENCHMARKS} | {"cfbench_avg7", "cfbench_multi_hop", "cfbench_single_hop"}
    for bench in BENCHMARKS:
        task = data["results"][f"cfbench_{bench}"]
        assert all(task[f"{m},none"] == results["scores"][bench][m] for m in METRICS)
        assert 0 < task["cover_em_stderr,none"] < 0.1
        assert data["n-samples"][f"cfbench_{bench}"] == {"original": 40, "effective": 40}
        assert data["configs"][f"cfbench_{bench}"]["metadata"]["metric_version"] == results["metric_version"]
    assert data["groups"]["cfbench_avg7"]["cover_em,none"] == results["scores"]["avg7"]["cover_em"]
    assert data["config"]["model_args"] == "pretrained=m"


def test_reported_rows_stand_apart_and_an_empty_leaderboard_builds(tmp_path):
    code, _, lines = cli("leaderboard", "build", "--root", tmp_path, "--suite", "fixed1325")
    assert code == 0 and lines == [f"{tmp_path / 'fixed1325'}: 0 runs"]
    board = json.loads((tmp_path / "fixed1325" / "results.json").read_text())
    assert board["tables"] == [] and board["reported"]["note"] == "reported, not reproduced"
    assert {r["treatment"]: r["avg7"]["Qwen3.5-9B"] for r in board["reported"]["rows"]}["MSV+CrossFit"] == 0.515
    readme = (tmp_path / "fixed1325" / "README.md").read_text()
    assert "## Reported, not reproduced" in readme and "| CrossFit | 48.8 | 51.2 |" in readme
    (other,) = build([tmp_path / "mini"])
    assert other["reported"] is None


def test_committed_leaderboards_are_what_their_stored_predictions_give(tmp_path):
    """`cfbench leaderboard rescore` recomputes every committed table from the stored runs, byte for byte."""
    committed = REPO / "leaderboards"
    suites = sorted(p.name for p in committed.iterdir() if (p / "runs").is_dir())
    assert suites == ["fixed1325", "mini"]
    for suite in suites:
        shutil.copytree(committed / suite, tmp_path / suite, ignore=shutil.ignore_patterns("pending"))  # runs, tables, questions/
    code, _, lines = cli("leaderboard", "rescore", "--root", tmp_path)
    assert code == 0, lines
    assert [line.split(":")[0] for line in lines] == [str(tmp_path / s) for s in suites]


def test_committed_leaderboard_holds_smollm2_over_the_whole_suite():
    suite = load_suite("fixed1325")
    runs = [load_run(d) for d in sorted((REPO / "leaderboards" / "fixed1325" / "runs").iterdir())]
    whole = [r for r in runs if r.results["model"]["model"] == "smollm2-135m" and r.results["suite"]["sha256"] == suite.sha256]
    assert whole, "leaderboards/fixed1325/runs holds no SmolLM2-135M run on the bundled fixed1325 suite"
    assert [row["id"] for row in whole[0].rows] == [q.id for q in suite.questions]
