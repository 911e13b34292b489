"""The audit's arithmetic on constructed records: references, verdicts, per-step and per-round rates, reports, errors."""

import json
import struct

import pytest
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness.errors import CfbenchError
from cfbench.training.audit.audit import audit_run, rates, round_means
from cfbench.training.audit.judge import GoldJudge, JudgeCache, parse_reference, parse_verdict, reference_prompt, slug
from cfbench.training.audit.report import write_report
from cfbench.training.config.schema import to_json
from cfbench.training.treatments import load_config
from tests.audit_runs import CASES, CORPUS, make_run, row

SOURCE = '"Mount Everest"\nMount Everest is the highest mountain.\nIts height is 8849   metres.'


def test_reference_needs_a_quote_from_the_source():
    ok = parse_reference("<quote>its HEIGHT is 8849 metres</quote> <reference>8849 metres</reference>", [SOURCE])
    assert (ok.status, ok.answer, ok.reason) == ("resolved", "8849 metres", None)  # case and spacing do not matter
    cases = {
        "<quote>Its height is 9000 metres</quote><reference>9000 metres</reference>": "the quote is in none of the evidence documents",
        "<reference>8849 metres</reference>": "no <quote> of the evidence",
        "<quote>Its height is 8849 metres</quote><reference>Unresolved.</reference>": "the judge found no support in the evidence",
        "The mountain is 8849 metres high.": "no <reference> answer",
        "<quote>x</quote><reference>  </reference>": "no <reference> answer",
        "<quote>height is</quote><reference>8849 metres</reference>": "the quote is under 3 words and does not hold the answer",
        # a short quote holds its answer as whole words only: "849" is inside "8849" but is not what it says
        "<quote>is 8849</quote><reference>849</reference>": "the quote is under 3 words and does not hold the answer",
        "<quote>Its height is 8849 metres</quote><reference>The</reference>": "the reference is empty once normalised",
    }
    for output, reason in cases.items():
        ref = parse_reference(output, [SOURCE])
        assert (ref.status, ref.reason) == ("unresolved", reason), output
    # a thinking block is dropped, and an echo of the instructions loses to the judge's own last span
    echoed = (
        "<think>maybe <reference>unresolved</reference></think> Copy between <quote> and </quote>, answer between <reference> "
        "and </reference>.\n<quote>8849 metres</quote><reference>8,849 metres</reference>"
    )
    assert parse_reference(echoed, [SOURCE]).to_json() == {
        "status": "resolved",
        "answer": "8,849 metres",
        "quote": "8849 metres",
        "reason": None,
        "quote_from": 0,
    }


# A 2-hop question: the source names the river, the proposer's search found three passages, and only the second
# says where the river ends. The source's gold answer (Black Sea) is in no sentence of the source itself.
HOP_SOURCE = '"Vienna"\nVienna lies on the Danube. It is the capital of Austria.'
HOP_EVIDENCE = [
    {"turn": 1, "id": "danube-1", "contents": '"Danube"\nThe Danube is the second longest river in Europe.'},
    {"turn": 1, "id": "danube-2", "contents": '"Danube"\nThe river rises in the Black Forest. It flows into the Black Sea.'},
    {"turn": 1, "id": "sea", "contents": '"Sea"\nSeas are large bodies of salt water.'},
]


def test_the_judge_reads_the_proposers_retrieved_passages_and_says_which_one_it_quoted():
    documents = [HOP_SOURCE, *(e["contents"] for e in HOP_EVIDENCE)]
    prompt = reference_prompt(documents, "Into which sea flows the river Vienna lies on?")
    assert [line.split("]")[0] for line in prompt.splitlines()[:4]] == ["[S", "[P1", "[P2", "[P3"]
    ref = parse_reference("<quote>It flows into the Black  Sea.</quote><reference>Black Sea</reference>", documents)
    assert (ref.status, ref.quote_from) == ("resolved", 2)
    assert parse_reference("<quote>It flows into the Black Sea.</quote><reference>Black Sea</reference>", [HOP_SOURCE]).reason == (
        "the quote is in none of the evidence documents"
    )  # what the source-only judge did: unresolved


def test_a_2_hop_question_resolved_from_the_second_retrieved_passage_with_coverage_by_hops(tmp_path):
    run = make_run(
        tmp_path / "run",
        corpus_rows=[*CORPUS, {"id": "vienna", "contents": HOP_SOURCE, "answers": ["Black Sea"]}],
        cases={
            2: [
                row(
                    2,
                    1,
                    0,
                    "vienna",
                    "Black Sea",
                    ["Black Sea", "North Sea"],
                    "Into which sea flows Vienna's river?",
                    hops=2,
                    evidence=HOP_EVIDENCE,
                    contents=HOP_SOURCE,
                ),
                row(2, 1, 1, "paris", "Paris", ["Paris"], "Which city is the capital of France?"),
            ]
        },
    )
    record = audit_run(run, GoldJudge(run / "corpus.jsonl"), tmp_path / "judged")
    two_hop = json.loads((tmp_path / "judged" / "step-2.jsonl").read_text().splitlines()[0])
    assert two_hop["reference"] == {
        "status": "resolved",
        "answer": "Black Sea",
        "quote": "It flows into the Black Sea.",
        "reason": None,
        "quote_from": 2,
    }
    assert [x["correct"] for x in two_hop["responses"]] == [True, False] and two_hop["evidence"] == HOP_EVIDENCE
    assert [(h["hops"], h["questions"], h["resolved_questions"], h["coverage"]) for h in record["hops"]] == [(1, 1, 1, 1.0), (2, 1, 1, 1.0)]
    write_report([record], [run], tmp_path / "report")
    assert "| dr-zero | 2 | 1 | 1 | 1.000 | 0.500 | 0.500 | 0.000 | 0.000 | 1.000 |" in (tmp_path / "report" / "audit.md").read_text()


def test_verdict_parsing():
    outputs = ["Yes.", "no, it is not", " YES", "Maybe", "", "The answer is yes", "<think>It is not.</think>\nYes"]
    assert [parse_verdict(x) for x in outputs] == [True, False, True, None, None, None, True]


def test_gold_judge_references_and_verdicts(tmp_path):
    run = make_run(tmp_path / "run")
    judge = GoldJudge(run / "corpus.jsonl")
    rows = [
        {"source_id": s, "source": r["source"], "question": "?", "evidence": []}
        for s, r in [("everest", CASES[1][1]), ("nile", CASES[1][2]), ("moon", CASES[3][0])]
    ]
    everest, nile, moon = judge.references(rows)
    assert (everest.status, everest.answer, everest.quote) == ("resolved", "8849 metres", "Its height is 8849 metres above sea level.")
    assert nile.reason == "the source has no gold answer" and moon.reason == "no gold answer occurs in a sentence of the evidence"
    verdicts = judge.verdicts([(rows[0], everest, c) for c in ["8,849 m", "8849 Metres.", "8000 metres", " "]])
    assert [(v.correct, v.by) for v in verdicts] == [(True, "gold"), (True, "match"), (False, "gold"), (False, "empty")]


def test_step_and_round_rates_by_hand(tmp_path):
    run = make_run(tmp_path / "run")
    record = audit_run(run, GoldJudge(run / "corpus.jsonl"), tmp_path / "judged")
    steps = {s["step"]: s for s in record["steps"]}
    assert steps[1] | {"coverage": round(steps[1]["coverage"], 6)} == {
        "step": 1,
        "round": 1,
        "phase": "proposer",
        "tasks": 4,
        "questions": 3,
        "resolved_questions": 2,
        "pairs": 15,
        "resolved_pairs": 10,
        "coverage": round(10 / 15, 6),
        "T_P": 0.5,
        "T_S": 0.5,
        "A": 0.5,
        "F": 0.2,
        "L": 0.2,
    }
    # every response agrees with a wrong label: all agreement is false agreement
    assert {k: steps[2][k] for k in ("T_P", "T_S", "A", "F", "L", "coverage")} == {
        "T_P": 0.0,
        "T_S": 0.0,
        "A": 1.0,
        "F": 1.0,
        "L": 0.0,
        "coverage": 1.0,
    }
    assert {k: steps[3][k] for k in ("T_P", "F", "resolved_pairs", "coverage")} == {
        "T_P": None,
        "F": None,
        "resolved_pairs": 0,
        "coverage": 0.0,
    }
    r1, r2 = record["rounds"]
    assert r1["steps"] == 2 and r1["steps_with_pairs"] == 2
    assert {k: r1[k] for k in ("tasks", "questions", "resolved_questions", "pairs", "resolved_pairs")} == {
        "tasks": 4 + len(CASES[2]),
        "questions": 3 + sum(r["admitted"] for r in CASES[2]),
        "resolved_questions": 2 + steps[2]["resolved_questions"],
        "pairs": 15 + steps[2]["pairs"],
        "resolved_pairs": 10 + steps[2]["resolved_pairs"],
    }
    everything = [json.loads(x) for n in steps for x in (tmp_path / "judged" / f"step-{n}.jsonl").read_text().splitlines()]
    assert record["overall"] == rates(everything) and record["overall"]["resolved_pairs"] == sum(
        s["resolved_pairs"] for s in steps.values()
    )
    assert pytest.approx([r1[k] for k in ("T_P", "T_S", "A", "F", "L", "coverage")]) == [0.25, 0.25, 0.75, 0.6, 0.1, (10 / 15 + 1) / 2]
    assert r2["F"] is None and r2["coverage"] == 0.0 and r2["steps_with_pairs"] == 0
    judged = [json.loads(x) for x in (tmp_path / "judged" / "step-1.jsonl").read_text().splitlines()]
    assert [q["task_id"] for q in judged] == ["s1-t0", "s1-t1", "s1-t2"]  # the rejected draft is not a pair
    assert judged[2]["reference"]["status"] == "unresolved" and judged[2]["label"] is None
    assert [x["matches_label"] for x in judged[0]["responses"]] == [True, True, False, False, True]
    # a response that matches the label shares its verdict, so F stays inside A; only the others are judged
    assert judged[0]["label"]["by"] == "match" and [x["by"] for x in judged[0]["responses"]] == ["label", "label", "gold", "empty", "label"]
    assert [x["by"] for x in judged[1]["responses"]] == ["label", "label", "match", "gold", "gold"]


def test_a_round_is_the_mean_of_its_step_rates_not_of_pairs():
    # step 1: 1 of 1 pair false agreement; step 2: 0 of 9. Pooled pairs would give 0.1, the protocol's mean of rates 0.5.
    counts = {"tasks": 2, "questions": 1, "resolved_questions": 1}
    steps = [
        {
            "step": 1,
            "round": 1,
            **counts,
            "pairs": 1,
            "resolved_pairs": 1,
            "coverage": 1.0,
            "T_P": 0.0,
            "T_S": 0.0,
            "A": 1.0,
            "F": 1.0,
            "L": 0.0,
        },
        {
            "step": 2,
            "round": 1,
            **counts,
            "pairs": 9,
            "resolved_pairs": 9,
            "coverage": 1.0,
            "T_P": 1.0,
            "T_S": 1.0,
            "A": 1.0,
            "F": 0.0,
            "L": 0.0,
        },
    ]
    assert round_means(steps)[0]["F"] == 0.5


def test_unreadable_verdict_leaves_the_pair_unresolved():
    judged = [
        {
            "reference": {"status": "resolved"},
            "label": {"correct": False},
            "responses": [{"correct": None, "matches_label": True}, {"correct": False, "matches_label": True}],
        }
    ]
    r = rates(judged)
    assert (r["pairs"], r["resolved_pairs"], r["coverage"], r["F"]) == (2, 1, 0.5, 1.0)


def test_report_tables_plot_and_cost_ratios(tmp_path):
    dr = make_run(tmp_path / "dr", "dr-zero", generations=10, tokens=100)
    msv = make_run(tmp_path / "msv", "msv", generations=25, tokens=300, cpu=50.0)
    records = [audit_run(run, GoldJudge(run / "corpus.jsonl"), run / "judged") for run in (dr, msv)]
    write_report(records, [dr, msv], tmp_path / "report")
    md = (tmp_path / "report" / "audit.md").read_text()
    assert "| dr-zero | 1 | 2/2 | 4/5 | 15/20 | 0.250 | 0.250 | 0.750 | 0.600 | 0.100 | 0.833 |" in md
    assert "| msv | 2 | 0/1 | 1/1 | 0/5 | - | - | - | - | - | 0.000 |" in md
    # pooled over the run's 15 resolved pairs: 5 correct labels (step 1), F 2 of step 1's 10 and all 5 of step 2's
    assert "| dr-zero | all (pooled) | | 5/6 | 15/25 | 0.333 | 0.333 | 0.667 | 0.467 | 0.133 | 0.600 |" in md
    png = (tmp_path / "report" / "trajectory.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1100, 700)
    costs = {c["treatment"]: c for c in json.loads((tmp_path / "report" / "cost.json").read_text())["costs"]}
    assert costs["msv"]["generations_per_candidate"] == 75 / 6 and costs["msv"]["msv_generations"] == 36
    assert costs["msv"]["ratio_to_dr_zero"]["generations"] == 2.5 and costs["msv"]["ratio_to_dr_zero"]["generated_tokens"] == 3.0
    assert costs["dr-zero"]["ratio_to_dr_zero"]["wall_s"] == 1.0 and costs["msv"]["ratio_to_dr_zero"]["msv_generations"] is None
    assert costs["dr-zero"]["wall_s"] == 108.0 and costs["dr-zero"]["accelerator_hours"] == 0.03
    assert costs["dr-zero"]["cpu_hours"] == 60 / 3600 and costs["msv"]["ratio_to_dr_zero"]["cpu_hours"] == pytest.approx(2.5)
    assert "| 0.0417 (2.50x) | cpu |" in (tmp_path / "report" / "cost.md").read_text()
    rows = (tmp_path / "report" / "steps.csv").read_text().splitlines()
    assert rows[0].startswith("treatment,step,round,phase,tasks,questions") and len(rows) == 1 + 6
    # the csv carries the same pooled row: 3 steps (2 with resolved pairs), 6 tasks, 5 admitted, 15 of 25 pairs resolved
    assert "\ndr-zero,all,3,2,6,5,25,15,0.333" in (tmp_path / "report" / "audit.csv").read_text()


def test_a_run_without_cpu_time_has_no_cpu_hours_and_a_multi_process_one_counts_every_device(tmp_path):
    from cfbench.training.audit.report import run_cost

    run = make_run(tmp_path / "dr", cpu=None)
    record = audit_run(run, GoldJudge(run / "corpus.jsonl"), run / "judged")
    assert run_cost(run, record)["cpu_hours"] is None and run_cost(run, record)["wall_s"] == 108.0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r | {"processes": 8}) + "\n" for r in rows))  # a run on 8 GPUs
    assert run_cost(run, record)["wall_s"] == 108.0 and run_cost(run, record)["accelerator_hours"] == 8 * 108.0 / 3600


def test_cli_audits_several_runs_into_one_report(tmp_path, monkeypatch):
    runs = [make_run(tmp_path / name, name) for name in ("dr-zero", "crossfit")]
    monkeypatch.chdir(tmp_path)  # a repository's runs, audited from its root
    result = CliRunner().invoke(main, ["audit", *map(str, runs), "--judge", "reference", "--report", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    assert "| crossfit | 1 | 2/2 | 4/5 | 15/20 | 0.250" in result.stdout
    assert (runs[1] / "judged" / "reference" / "audit.json").is_file() and (tmp_path / "report" / "cost.md").is_file()
    record = json.loads((runs[1] / "judged" / "reference" / "audit.json").read_text())
    assert record["run"] == "crossfit"  # as a clone anywhere else would write it, not this machine's absolute path


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--judge", "gpt4"],
            "unknown --judge 'gpt4'; use openai:MODEL@URL, openai:MODEL (hosted), hf:MODEL_OR_DIR, "
            "sheet:NAME (letters, digits, ._-) or reference",
        ),
        (["--judge", "openai:qwen@ftp://host"], "--judge 'openai:qwen@ftp://host': write openai:MODEL@URL"),
    ],
)
def test_bad_judge_spec(tmp_path, args, message):
    run = make_run(tmp_path / "run")
    result = CliRunner().invoke(main, ["audit", str(run), *args])
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and message in lines[0]


def test_audit_refuses_a_run_without_audit_records(tmp_path):
    (tmp_path / "sr1").mkdir()
    (tmp_path / "sr1" / "config.json").write_text(json.dumps(to_json(load_config("search-r1", "cpu-smoke"))))
    result = CliRunner().invoke(main, ["audit", str(tmp_path / "sr1"), "--judge", "reference"])
    assert result.exit_code == 2 and "a 'search-r1' run has no audit/ records" in result.stderr


def test_cache_survives_a_torn_last_line_and_refuses_damage_elsewhere(tmp_path):
    path = tmp_path / "cache.jsonl"
    JudgeCache(path).add({"a": "yes", "b": "no"})
    with path.open("a") as fh:
        fh.write('{"key": "c", "outp')  # a crash mid-write
    cache = JudgeCache(path)
    assert cache.outputs == {"a": "yes", "b": "no"}
    cache.add({"c": "yes"})  # appended after the cut, not onto the torn line
    assert JudgeCache(path).outputs == {"a": "yes", "b": "no", "c": "yes"}
    path.write_text('{"key": "a"\n{"key": "b", "output": "no"}\n')
    with pytest.raises(CfbenchError, match="cache.jsonl:1: not a judge cache entry"):
        JudgeCache(path)


def test_judge_slugs():
    assert slug("openai:Qwen/Qwen3-8B@http://h:8000/v1") == "openai-Qwen-Qwen3-8B"
    assert slug("hf:/models/judge") == "hf-models-judge" and slug("reference") == "reference"


def test_false_agreement_by_label_provenance(tmp_path):
    """CASES with label provenance: paris (step 1) from a solver new to the source, everest (step 1) from one that had trained
    on it, everest "K2" (step 2) a proposer draft; moon (step 3) is unresolved. Hand counts: F 0, 2/5 and 5/5."""
    said = {
        "s1-t0": {"model": "main", "trained_on_this_source": False},
        "s1-t1": {"model": "main", "trained_on_this_source": True},
        "s2-t0": {"model": "proposer", "trained_on_this_source": True},
    }
    cases = {step: [r | {"label_provenance": said.get(r["task_id"])} for r in rows] for step, rows in CASES.items()}
    record = audit_run(make_run(tmp_path / "run", cases=cases), GoldJudge(tmp_path / "run" / "corpus.jsonl"), tmp_path / "judged")
    assert [(g["label_from"], g["questions"], g["resolved_pairs"], g["F"], g["L"]) for g in record["labels"]] == [
        ("solver trained on the source", 1, 5, 0.4, 0.4),
        ("solver not trained on the source", 1, 5, 0.0, 0.0),
        ("proposer", 1, 5, 1.0, 0.0),
        ("unrecorded", 2, 0, None, None),
    ]  # nile (no gold) and moon: no label provenance given
    write_report([record], [tmp_path / "run"], tmp_path / "report")
    assert (
        "| dr-zero | solver trained on the source | 1 | 1 | 0.000 | 0.400 | 0.400 | 0.400 | 0.400 | 1.000 |"
        in (tmp_path / "report" / "audit.md").read_text()
    )
