"""LLM judges for real: SmolLM2-135M served on loopback through the OpenAI-compatible path, and in process.

SmolLM2-135M is far too small to be a good judge; these tests are about the path (requests, parsing,
cache, resume), and every number they check comes from what the model really answered.
"""

import json

from click.testing import CliRunner

from cfbench.cli import main
from tests.audit_runs import CORPUS, SOURCES, make_run, row
from tests.servers import cli_server
from cfbench.training.audit.audit import CACHE_FILE, audit_run
from cfbench.training.audit.judge import Reference, judge_for, parse_reference

CASES = {1: [row(1, 1, 0, "paris", "Paris", ["Paris", "Lyon"], "Which city is the capital of France?")],
         2: [row(2, 1, 0, "everest", "8000 metres", ["8849 metres", "eight"], "How high is Mount Everest?")]}


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
        asked = [({"question": "How high is Mount Everest?"}, Reference("resolved", "8849 metres", "8849 metres", None), c)
                 for c in ["8,849 m", "eight thousand", "8849 metres"]]
        verdicts = judge.verdicts(asked)
        assert [v.by for v in verdicts] == ["judge", "judge", "match"] and judge.sent == first["judge_requests"]["sent"] + 2
    # the server is gone: the rerun is answered from the cache alone, with the same judgements
    result = CliRunner().invoke(main, ["audit", str(run), "--judge", f"openai:smollm2@{url}/v1"])
    assert result.exit_code == 0, result.stderr
    assert f"judge requests {first['judge_requests']['needed']} (0 sent, {first['judge_requests']['needed']} from the cache)" in result.stderr.replace("\n", " ")
    assert {p.name: p.read_text() for p in out.glob("step-*.jsonl")} == steps
    again = json.loads((out / "audit.json").read_text())
    assert again["steps"] == first["steps"] and again["judge_requests"] == {"needed": first["judge_requests"]["needed"], "sent": 0}


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
