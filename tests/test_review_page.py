"""The judge review page opened from disk in headless Chromium: a person's marks, made by clicking in the page and
exported with its button, come back through `cfbench audit agreement` as agreement and Cohen's kappa per verdict type.
Needs Debian's chromium (scripts/test installs it; docs/development.md, Tests)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.training.audit.audit import audit_run
from cfbench.training.audit.judge import GoldJudge
from cfbench.training.audit.review import cohen_kappa
from chromium import Chromium
from tests.audit_runs import make_run

VERDICTS = 'Array.from(document.querySelectorAll(".verdict")).map(v => v.dataset.id)'


@pytest.mark.slow
def test_marks_made_in_the_page_round_trip_into_the_agreement_report(tmp_path):
    run = make_run(tmp_path / "run")  # tests/audit_runs.py CASES: 5 admitted questions, judged by their gold answers
    audit_run(run, GoldJudge(run / "corpus.jsonl"), run / "judged" / "reference")
    made = CliRunner().invoke(main, ["audit", "review", str(run), "--sample", "5", "--judge", "reference"])
    assert made.exit_code == 0, made.output
    page = run / "judged" / "reference" / "review.html"
    browser = Chromium(tmp_path / "profile")
    try:
        browser.open(page)
        assert browser.evaluate("performance.getEntriesByType('resource').length") == 0  # opens from disk, fetches nothing
        assert browser.evaluate('document.querySelectorAll("section").length') == 5
        # the 2-hop-free CASES: references of q0 paris, q1 everest, q2 nile (none), q3 everest "K2", q4 moon (none);
        # labels of paris (right), everest and K2 (wrong); responses judged on their own: paris "Lyon", "", everest x3
        assert browser.evaluate(VERDICTS) == [
            "q0-reference",
            "q0-label",
            "q0-r2",
            "q0-r3",
            "q1-reference",
            "q1-label",
            "q1-r2",
            "q1-r3",
            "q1-r4",
            "q2-reference",
            "q3-reference",
            "q3-label",
            "q4-reference",
        ]
        wrong, unmarked = {"q4-reference", "q0-r2"}, {"q0-r3"}
        for vid in browser.evaluate(VERDICTS):
            if vid not in unmarked:
                choice = "wrong" if vid in wrong else "right"
                browser.evaluate(f'document.querySelector(\'input[name="{vid}"][value="{choice}"]\').click()')
        assert browser.evaluate('document.getElementById("count").textContent') == "12 of 13 marked"
        browser.evaluate('document.getElementById("export").click()')
        exported = browser.evaluate('document.getElementById("exported").value')
    finally:
        browser.close()
    marks = tmp_path / "marks.json"
    marks.write_text(exported)
    assert {m["id"]: m["human"] for m in json.loads(exported)["marks"]}["q0-r3"] is None
    report = CliRunner().invoke(main, ["audit", "agreement", str(marks)])
    assert report.exit_code == 0, report.output
    # reference: judge resolved/resolved/unresolved/resolved/unresolved; the person disagrees on q4 only:
    # agreement 4/5, p_e = .6 x .8 + .4 x .2 = .56, kappa = (.8 - .56) / .44
    assert f"| reference | 5 | 0 | 0.800 | {0.24 / 0.44:.3f} |" in report.stdout
    assert "| label | 3 | 0 | 1.000 | 1.000 |" in report.stdout
    # responses: judge Lyon wrong (person: right), 8849 metres right, 8,849 m right, K2 wrong; "" left unmarked:
    # agreement 3/4, p_e = .5 x .75 + .5 x .25 = .5, kappa = .5
    assert "| response | 4 | 1 | 0.750 | 0.500 |" in report.stdout


def test_cohen_kappa_by_hand_and_where_it_is_undefined():
    assert cohen_kappa([(True, True), (False, False)]) == 1.0
    assert cohen_kappa([(True, False), (False, True)]) == -1.0
    assert cohen_kappa([(True, True)] * 3) is None and cohen_kappa([]) is None


def test_agreement_refuses_a_file_that_is_not_an_export(tmp_path):
    bad = tmp_path / "marks.json"
    bad.write_text(json.dumps({"marks": [{"id": "q0-label", "type": "label", "judge": True, "human": "maybe"}]}))
    result = CliRunner().invoke(main, ["audit", "agreement", str(bad)])
    assert result.exit_code == 2 and "field human must be right, wrong or null, got 'maybe'" in result.stderr
    bad.write_text("[]")
    result = CliRunner().invoke(main, ["audit", "agreement", str(bad)])
    assert result.exit_code == 2 and "not a review export" in result.stderr
