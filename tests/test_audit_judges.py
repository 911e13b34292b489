"""LLM judges for real: SmolLM2-135M served on loopback through the OpenAI-compatible path, and in process.

SmolLM2-135M is far too small to be a good judge; these tests are about the path (requests, parsing,
cache, resume), and every number they check comes from what the model really answered.
"""

import json

import pytest
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness.errors import CfbenchError
from cfbench.training.audit.audit import CACHE_FILE, audit_run
from cfbench.training.audit.judge import AnswersWaiting, JudgeCache, Reference, Verdict, judge_for, parse_reference, slug
from tests.audit_runs import CORPUS, SOURCES, make_run, row
from tests.openai_stub import openai_stub
from tests.servers import cli_server

CASES = {
    1: [row(1, 1, 0, "paris", "Paris", ["Paris", "Lyon"], "Which city is the capital of France?")],
    2: [row(2, 1, 0, "everest", "8000 metres", ["8849 metres", "eight"], "How high is Mount Everest?")],
}


@pytest.mark.slow
def test_openai_judge_on_loopback_then_a_rerun_from_the_cache_alone(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    out = run / "judged" / "openai-smollm2"
    with cli_server(["serve-model", "--ckpt", "smollm2-135m", "--name", "smollm2", "--threads", "2"]) as url:
        judge = judge_for(f"openai:smollm2@{url}/v1", run / "corpus.jsonl", out / CACHE_FILE)
        first = audit_run(run, judge, out)
        assert judge.sent == judge.needed >= 2  # a reference request per admitted question, verdicts where resolved
        steps = {p.name: p.read_text() for p in out.glob("step-*.jsonl")}
        for line in (out / "step-1.jsonl").read_text().splitlines() + (out / "step-2.jsonl").read_text().splitlines():
            q = json.loads(line)
            cached = [json.loads(x)["output"] for x in (out / CACHE_FILE).read_text().splitlines()]
            assert any(parse_reference(c, [SOURCES[q["source_id"]]]).to_json() == q["reference"] for c in cached)
        # verdicts the rules cannot settle go to the judge too
        asked = [
            ({"question": "How high is Mount Everest?"}, Reference("resolved", "8849 metres", "8849 metres", None), c)
            for c in ["8,849 m", "eight thousand", "8849 metres"]
        ]
        verdicts = judge.verdicts(asked)
        assert [v.by for v in verdicts] == ["judge", "judge", "match"] and judge.sent == first["judge_requests"]["sent"] + 2
    # the server is gone: the rerun is answered from the cache alone, with the same judgements
    result = CliRunner().invoke(main, ["audit", str(run), "--judge", f"openai:smollm2@{url}/v1"])
    assert result.exit_code == 0, result.stderr
    assert (
        f"judge requests {first['judge_requests']['needed']} (0 sent, {first['judge_requests']['needed']} from the cache)"
        in result.stderr.replace("\n", " ")
    )
    assert {p.name: p.read_text() for p in out.glob("step-*.jsonl")} == steps
    again = json.loads((out / "audit.json").read_text())
    assert again["steps"] == first["steps"] and again["judge_requests"] == {"needed": first["judge_requests"]["needed"], "sent": 0}


@pytest.mark.slow
def test_hf_judge_in_process_caches_by_exact_inputs(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    cache = tmp_path / CACHE_FILE
    judge = judge_for("hf:smollm2-135m", run / "corpus.jsonl", cache)
    rows = [{"source_id": "paris", "source": CORPUS[0]["contents"], "question": "Which city is the capital of France?", "evidence": []}]
    [ref] = judge.references(rows)
    assert (judge.needed, judge.sent) == (1, 1) and ref.status in ("resolved", "unresolved")
    judge.references(rows)
    assert (judge.needed, judge.sent) == (2, 1)  # same inputs: from the cache
    judge.references([rows[0] | {"question": "Which river runs through Paris?"}])
    assert (judge.needed, judge.sent) == (3, 2)  # another prompt: asked
    assert len(cache.read_text().splitlines()) == 2


def test_openai_judge_sends_key_effort_and_budget_and_the_hosted_api_needs_a_key(tmp_path, monkeypatch):
    yes = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "<think>same city</think>Yes"}, "finish_reason": "stop"}]}
    item = (
        {"question": "Which city is the capital of France?"},
        Reference("resolved", "Paris", "Paris is the capital", None),
        "the French capital",
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-456")
    with openai_stub(lambda path, body: (200, yes)) as (url, received):
        reasoning = judge_for(
            f"openai:stub-model@{url}",
            tmp_path / "corpus.jsonl",
            tmp_path / "a" / CACHE_FILE,
            reasoning_effort="low",
            max_output_tokens=512,
        )
        greedy = judge_for(f"openai:stub-model@{url}", tmp_path / "corpus.jsonl", tmp_path / "b" / CACHE_FILE)
        assert reasoning.verdicts([item]) == greedy.verdicts([item]) == [Verdict(True, "judge")]
    assert [r["path"] for r in received] == ["/v1/chat/completions"] * 2
    assert {r["headers"]["authorization"] for r in received} == {"Bearer sk-env-456"}
    assert received[0]["body"]["reasoning_effort"] == "low" and received[0]["body"]["max_completion_tokens"] == 512
    assert "temperature" not in received[0]["body"] and "chat_template_kwargs" not in received[0]["body"]
    assert received[1]["body"]["temperature"] == 0 and received[1]["body"]["max_completion_tokens"] == 8
    assert received[1]["body"]["chat_template_kwargs"] == {"enable_thinking": False}  # vLLM's field, via extra_body
    assert reasoning.identity == "openai:stub-model|reasoning_effort=low|max_output_tokens=512" and greedy.identity == "openai:stub-model"
    # openai:MODEL with no URL is the hosted API, which needs a key
    hosted = judge_for("openai:gpt-5-mini", tmp_path / "corpus.jsonl", tmp_path / "c" / CACHE_FILE, reasoning_effort="high")
    assert str(hosted.chat._client.base_url) == "https://api.openai.com/v1/"
    assert slug("openai:gpt-5-mini", "high") == "openai-gpt-5-mini-high" and slug("openai:qwen@http://h:1/v1") == "openai-qwen"
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(CfbenchError, match="hosted OpenAI API needs a key: set OPENAI_API_KEY or pass --api-key"):
        judge_for("openai:gpt-5-mini", tmp_path / "corpus.jsonl", tmp_path / "c" / CACHE_FILE)
    with pytest.raises(CfbenchError, match="are for openai: judges"):
        judge_for("reference", tmp_path / "corpus.jsonl", tmp_path / "c" / CACHE_FILE, reasoning_effort="high")


def _fill(sheet, answer) -> int:
    """Write answer(row) into every waiting row of a sheet judge's file; returns how many."""
    rows = [json.loads(line) for line in sheet.read_text().splitlines()]
    waiting = [r for r in rows if r["output"] is None]
    for r in waiting:
        r["output"] = answer(r)
    sheet.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(waiting)


def test_sheet_judge_asks_through_a_file_in_two_rounds_and_its_answers_pass_the_same_checks(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    out = run / "judged" / "sheet-annotator"
    sheet = out / "sheet.jsonl"
    audit = ["audit", str(run), "--judge", "sheet:annotator"]
    first = CliRunner().invoke(main, audit)
    assert first.exit_code == 2 and "judge prompts without an answer: 2, in" in first.stderr and "sheet.jsonl" in first.stderr
    assert not list(out.glob("step-*.jsonl")) and not (out / "audit.json").exists()  # nothing judged is written while answers wait

    def reference(row):
        if "France" in row["prompt"]:
            return "<quote>Paris is the capital of France.</quote><reference>Paris</reference>"
        return "<quote>Its height is 8000 metres</quote><reference>8000 metres</reference>"  # not what the source says

    assert _fill(sheet, reference) == 2 and all(json.loads(x)["max_tokens"] == 192 for x in sheet.read_text().splitlines())
    second = CliRunner().invoke(main, audit)
    # Paris resolved: the label "Paris" matches it by rule, "Lyon" needs a verdict; Everest's quote is in no document
    assert second.exit_code == 2 and "judge prompts without an answer: 1," in second.stderr
    [asked] = [json.loads(x) for x in sheet.read_text().splitlines() if json.loads(x)["output"] is None]
    assert "Reference answer: Paris\nCandidate answer: Lyon" in asked["prompt"] and asked["max_tokens"] == 8
    assert _fill(sheet, lambda row: "No") == 1
    third = CliRunner().invoke(main, audit)
    assert third.exit_code == 0, third.stderr
    record = json.loads((out / "audit.json").read_text())
    assert record["judge"]["identity"] == "sheet:annotator" and record["judge"]["decoding"] == f"answers written into {sheet}"
    paris = json.loads((out / "step-1.jsonl").read_text())
    everest = json.loads((out / "step-2.jsonl").read_text())
    assert paris["reference"]["answer"] == "Paris" and paris["label"] == {"correct": True, "by": "match"}
    assert [(r["correct"], r["by"]) for r in paris["responses"]] == [(True, "label"), (False, "judge")]
    assert everest["reference"]["reason"] == "the quote is in none of the evidence documents" and everest["label"] is None
    assert record["steps"][0]["T_S"] == 0.5 and record["steps"][0]["coverage"] == 1.0 and record["steps"][1]["coverage"] == 0.0
    assert not (out / CACHE_FILE).exists()  # the sheet is this judge's only store
    # an answer corrected in the sheet counts at the next audit
    rows = [json.loads(x) for x in sheet.read_text().splitlines()]
    sheet.write_text(
        "".join(json.dumps(r | {"output": "Yes"} if r["max_tokens"] == 8 else r) + "\n" for r in rows) + "\n"
    )  # and a blank line
    assert CliRunner().invoke(main, audit).exit_code == 0
    assert json.loads((out / "audit.json").read_text())["steps"][0]["T_S"] == 1.0


def test_sheet_judge_waits_only_on_what_it_asked_leaves_its_output_alone_and_collects_every_run(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    out = run / "judged" / "sheet-annotator"
    sheet = out / "sheet.jsonl"
    audit = ["audit", str(run), "--judge", "sheet:annotator"]
    CliRunner().invoke(main, audit)
    assert _fill(sheet, lambda row: "<reference>unresolved</reference>") == 2
    with sheet.open("a") as f:  # a prompt of a question a resumed run has since replaced: never asked again
        f.write(json.dumps({"key": "0" * 64, "prompt": "Question: gone?", "max_tokens": 192, "output": None}) + "\n")
    assert CliRunner().invoke(main, audit).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "sheet.jsonl"}
    # the run goes on (step 2 replaced, step 3 new): the audit stops for the new prompts and leaves out/ as it was
    (run / "audit" / "step-2.jsonl").unlink()
    (run / "audit" / "step-3.jsonl").write_text(json.dumps(row(3, 2, 0, "paris", "Paris", ["Paris"], "Where is the Seine?")) + "\n")
    other = make_run(tmp_path / "other", cases=CASES)
    result = CliRunner().invoke(main, ["audit", str(run), str(other), "--judge", "sheet:annotator", "--report", str(tmp_path / "report")])
    assert result.exit_code == 2
    assert f"judge prompts without an answer: 1, in {sheet}, 2, in {other / 'judged' / 'sheet-annotator' / 'sheet.jsonl'};" in (
        " ".join(result.stderr.split())
    )
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "sheet.jsonl"} == before


def test_sheet_judge_copies_answers_to_the_same_prompts_from_another_runs_sheet(tmp_path):
    donor = make_run(tmp_path / "donor", cases=CASES)
    donor_sheet = donor / "judged" / "sheet-annotator" / "sheet.jsonl"
    CliRunner().invoke(main, ["audit", str(donor), "--judge", "sheet:annotator"])
    paris = "<quote>Paris is the capital of France.</quote><reference>Paris</reference>"
    assert _fill(donor_sheet, lambda row: paris if "France" in row["prompt"] else "<reference>unresolved</reference>") == 2
    CliRunner().invoke(main, ["audit", str(donor), "--judge", "sheet:annotator"])
    assert _fill(donor_sheet, lambda row: "No") == 1  # the verdict on "Lyon"
    # a run sharing the Paris question (same source, same responses) and asking a new one
    seine = row(2, 1, 0, "paris", "Paris", ["Paris"], "Where is the Seine?")
    run = make_run(tmp_path / "run", cases={1: CASES[1], 2: [seine]})
    sheet = run / "judged" / "sheet-annotator" / "sheet.jsonl"
    audit = ["audit", str(run), "--judge", "sheet:annotator", "--answers-from", str(donor)]
    first = CliRunner().invoke(main, audit)
    assert first.exit_code == 2 and "judge prompts without an answer: 1, in" in first.stderr  # only the Seine's reference
    rows = [json.loads(x) for x in sheet.read_text().splitlines()]
    assert [(r["output"], r.get("copied_from")) for r in rows if "capital of France?" in r["prompt"]] == [
        (paris, str(donor_sheet)),
        ("No", str(donor_sheet)),
    ]
    assert _fill(sheet, lambda row: "<reference>unresolved</reference>") == 1
    assert CliRunner().invoke(main, ["audit", str(run), "--judge", "sheet:annotator"]).exit_code == 0  # the copies are in its sheet
    judged = json.loads((run / "judged" / "sheet-annotator" / "step-1.jsonl").read_text())
    assert [(r["correct"], r["by"]) for r in judged["responses"]] == [(True, "label"), (False, "judge")]
    # a run asking only what the donor answered finishes at once, its sheet written all the same
    twin = make_run(tmp_path / "twin", cases=CASES)
    assert CliRunner().invoke(main, ["audit", str(twin), "--judge", "sheet:annotator", "--answers-from", str(donor)]).exit_code == 0
    copies = [json.loads(x) for x in (twin / "judged" / "sheet-annotator" / "sheet.jsonl").read_text().splitlines()]
    assert len(copies) == 3 and {r["copied_from"] for r in copies} == {str(donor_sheet)}
    # only a sheet judge borrows, and only from a sheet that exists
    result = CliRunner().invoke(main, ["audit", str(run), "--judge", "reference", "--answers-from", str(donor)])
    assert result.exit_code == 2 and "--answers-from is for sheet:NAME judges, not --judge 'reference'" in result.stderr
    result = CliRunner().invoke(main, ["audit", str(run), "--judge", "sheet:other", "--answers-from", str(donor)])
    assert result.exit_code == 2 and f"{donor / 'judged' / 'sheet-other' / 'sheet.jsonl'}: no such sheet" in result.stderr


def test_sheet_judge_keeps_answers_written_while_it_ran(tmp_path):
    sheet = tmp_path / "sheet.jsonl"
    judge = judge_for("sheet:annotator", tmp_path / "corpus.jsonl", tmp_path / CACHE_FILE)
    judge._ask(["Is it?", "Is it not?"], 8)  # a replay asks, then trains the next variant for hours
    # meanwhile the annotator answers what an earlier run wrote into the sheet
    first = {"key": JudgeCache.key("sheet:annotator", "Is it?", 8), "prompt": "Is it?", "max_tokens": 8, "output": "yes"}
    sheet.write_text(json.dumps(first) + "\n")
    with pytest.raises(AnswersWaiting):  # this run judged without that answer: the next one uses it
        judge.require_answers()
    assert [json.loads(x)["output"] for x in sheet.read_text().splitlines()] == ["yes", None]


def test_sheet_judge_refuses_a_torn_sheet_and_a_bad_name(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    sheet = run / "judged" / "sheet-x" / "sheet.jsonl"
    sheet.parent.mkdir(parents=True)
    sheet.write_text('{"key": "k", "prompt": "p", "max_tokens": 8, "output": 3}\n')
    result = CliRunner().invoke(main, ["audit", str(run), "--judge", "sheet:x"])
    assert result.exit_code == 2 and f"{sheet}:1: not a sheet row" in result.stderr
    with pytest.raises(CfbenchError, match="sheet:NAME"):
        judge_for("sheet:a/b", run / "corpus.jsonl", tmp_path / CACHE_FILE)


def test_a_renamed_sheet_judge_reads_its_old_answers_and_reproduces_its_audit(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    old, new = run / "judged" / "sheet-annotator", run / "judged" / "sheet-llm-annotators"
    audit = ["audit", str(run), "--judge", "sheet:annotator"]
    CliRunner().invoke(main, audit)
    paris = "<quote>Paris is the capital of France.</quote><reference>Paris</reference>"
    _fill(old / "sheet.jsonl", lambda row: paris if "France" in row["prompt"] else "<reference>unresolved</reference>")
    CliRunner().invoke(main, audit)
    _fill(old / "sheet.jsonl", lambda row: "No")
    assert CliRunner().invoke(main, audit).exit_code == 0
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    result = CliRunner().invoke(main, ["audit", "rename-judge", "sheet:annotator", "sheet:llm-annotators", str(run)])
    assert result.exit_code == 0, result.stderr
    assert "1 folders renamed, 3 files rewritten, 3 sheet rows re-keyed" in " ".join(result.stderr.split())
    assert not old.exists() and {p.name for p in new.iterdir()} == set(before)
    # Every answer reads under the new name: the audit asks nothing and writes what the rename wrote.
    renamed = {p.name: p.read_bytes() for p in new.iterdir()}
    assert renamed["audit.json"].decode() == before["audit.json"].decode().replace("sheet:annotator", "sheet:llm-annotators").replace(
        "sheet-annotator", "sheet-llm-annotators"
    )
    assert CliRunner().invoke(main, ["audit", str(run), "--judge", "sheet:llm-annotators"]).exit_code == 0
    assert {p.name: p.read_bytes() for p in new.iterdir()} == renamed
    sheet = [json.loads(x) for x in (new / "sheet.jsonl").read_text().splitlines()]
    assert all(r["key"] == JudgeCache.key("sheet:llm-annotators", r["prompt"], r["max_tokens"]) for r in sheet)
    # A second rename finds nothing; a name that is not a sheet judge's is one line and changes nothing.
    result = CliRunner().invoke(main, ["audit", "rename-judge", "sheet:annotator", "sheet:llm-annotators", str(run)])
    assert "0 folders renamed, 0 files rewritten, 0 sheet rows re-keyed" in " ".join(result.stderr.split())
    result = CliRunner().invoke(main, ["audit", "rename-judge", "reference", "sheet:x", str(run)])
    assert result.exit_code == 2 and "renames sheet judges" in result.stderr
    assert {p.name: p.read_bytes() for p in new.iterdir()} == renamed


def test_two_judges_compared_on_the_same_questions(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    sheet = run / "judged" / "sheet-annotator" / "sheet.jsonl"
    audit = ["audit", str(run), "--judge", "sheet:annotator"]
    CliRunner().invoke(main, audit)
    paris = "<quote>Paris is the capital of France.</quote><reference>Paris</reference>"
    _fill(sheet, lambda row: paris if "France" in row["prompt"] else "<reference>unresolved</reference>")
    CliRunner().invoke(main, audit)
    _fill(sheet, lambda row: "No")  # Lyon is not the capital
    assert CliRunner().invoke(main, audit).exit_code == 0
    assert CliRunner().invoke(main, ["audit", str(run), "--judge", "reference"]).exit_code == 0
    result = CliRunner().invoke(main, ["audit", "compare-judges", str(run), "--judge", "reference", "--judge", "sheet:annotator"])
    assert result.exit_code == 0, result.stderr
    rows = dict([c.strip() for c in line.strip("|").split("|")] for line in result.stdout.splitlines()[4:])
    # The gold answers resolve both questions, the sheet only Paris; on Paris both give the same answer and the same
    # three verdicts (label Paris right, the response Paris right, Lyon wrong): kappa 1 with expected agreement 5/9.
    assert rows["questions resolved by reference"] == "2" and rows["questions resolved by sheet:annotator"] == "1"
    assert rows["agreement on resolved or not"] == "0.500" and rows["both resolved, same reference answer"] == "1 of 1"
    assert rows["pairs both resolved"] == "3" and rows["verdict agreement on those pairs"] == "1.000"
    assert rows["Cohen's kappa on those verdicts"] == "1.000"
    result = CliRunner().invoke(main, ["audit", "compare-judges", str(run), "--judge", "reference"])
    assert result.exit_code == 2 and "give exactly two judges" in result.stderr
