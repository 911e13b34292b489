"""`cfbench audit split-sheet` and `fill-sheet`: a sheet judge's waiting prompts dealt to annotators and merged back,
through the real audit command on constructed runs (tests/audit_runs.py)."""

import json

from click.testing import CliRunner

from cfbench.cli import main
from tests.audit_runs import make_run, row

CASES = {
    1: [row(1, 1, 0, "paris", "Paris", ["Paris", "Lyon"], "Which city is the capital of France?")],
    2: [row(2, 1, 0, "everest", "8000 metres", ["8849 metres", "eight"], "How high is Mount Everest?")],
    3: [row(3, 2, 0, "nile", "north", ["north", "south"], "Which way does the Nile flow?")],
    4: [row(4, 2, 0, "moon", "Apollo 11", ["Apollo 11"], "Which mission landed on the Moon?")],
}
REFERENCES = {  # what a careful annotator writes for each question's reference prompt
    "Which city is the capital of France?": "<quote>Paris is the capital of France.</quote><reference>Paris</reference>",
    "How high is Mount Everest?": "<quote>Its height is 8849 metres above sea level.</quote><reference>8849 metres</reference>",
    "Which way does the Nile flow?": "<quote>The Nile flows north into the Mediterranean.</quote><reference>north</reference>",
    "Which mission landed on the Moon?": "<reference>unresolved</reference>",  # the source does not say
}


def _cli(*args: str):
    return CliRunner().invoke(main, ["audit", *args])


def _asked(prompt: str) -> str:
    return next(q for q in REFERENCES if f"Question: {q}\n" in prompt)


def _sheet(run):
    return run / "judged" / "sheet-annotator" / "sheet.jsonl"


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _answer(files, answer) -> None:
    """Write answer(prompt) into every row of the share files, as the annotators do."""
    for path in files:
        path.write_text("".join(json.dumps(r | {"output": answer(r["prompt"])}) + "\n" for r in _rows(path)))


def _split(run, out, shares=2, seed=0):
    return _cli("split-sheet", str(run), "--judge", "sheet:annotator", "--shares", str(shares), "--seed", str(seed), "--out", str(out))


def _fill(run, split, *answers):
    return _cli("fill-sheet", str(run), "--judge", "sheet:annotator", str(split), *map(str, answers))


def test_a_split_deals_every_waiting_prompt_once_shuffled_by_its_seed(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    assert _cli(str(run), "--judge", "sheet:annotator").exit_code == 2  # four reference prompts wait
    sheet = _sheet(run)
    with sheet.open("a") as f:  # a prompt of a question a resumed run has since replaced: the audit never reads it
        f.write(json.dumps({"key": "0" * 64, "prompt": "Question: gone?", "max_tokens": 192, "output": None}) + "\n")
    before = sheet.read_bytes()
    result = _split(run, tmp_path / "a", shares=3, seed=7)
    assert result.exit_code == 0, result.stderr
    assert "4 waiting prompts of" in result.stderr and "1 rows no question asks now left out" in " ".join(result.stderr.split())
    assert _split(run, tmp_path / "b", shares=3, seed=7).exit_code == 0
    assert _split(run, tmp_path / "c", shares=3, seed=8).exit_code == 0
    same = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    assert same == {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}  # the seed decides everything
    assert set(same) == {"share-1.jsonl", "share-2.jsonl", "share-3.jsonl", "manifest.json"}
    shares = [_rows(tmp_path / "a" / f"share-{k}.jsonl") for k in (1, 2, 3)]
    assert [len(s) for s in shares] == [2, 1, 1] and all(
        r["output"] is None and set(r) == {"id", "prompt", "output"} for s in shares for r in s
    )
    dealt = [r["prompt"] for s in shares for r in s]
    waiting = [r for r in _rows(sheet) if r["key"] != "0" * 64]
    assert sorted(dealt) == sorted(r["prompt"] for r in waiting)  # every waiting prompt once, the unused row left out
    ids = [r["id"] for s in shares for r in s]
    assert len(set(ids)) == 4 and not set(ids) & {r["key"] for r in waiting}  # opaque ids, not the sheet's keys
    other = [r["prompt"] for k in (1, 2, 3) for r in _rows(tmp_path / "c" / f"share-{k}.jsonl")]
    assert sorted(other) == sorted(dealt) and other != dealt  # another seed, another order
    assert sheet.read_bytes() == before


def test_answers_filled_back_are_what_the_audit_goes_on_with(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    audit = [str(run), "--judge", "sheet:annotator"]
    _cli(*audit)
    assert _split(run, tmp_path / "references", shares=2).exit_code == 0
    _answer((tmp_path / "references").glob("share-*.jsonl"), lambda prompt: REFERENCES[_asked(prompt)])
    result = _fill(run, tmp_path / "references")
    assert result.exit_code == 0, result.stderr
    assert "4 answers written into the sheet" in result.stderr
    # the verdicts those references call for are asked but not in the sheet until the audit writes them: no split yet
    refused = _split(run, tmp_path / "early", shares=1)
    assert refused.exit_code == 2 and "the audit asks 4 prompts the sheet does not hold yet" in refused.stderr
    assert not (tmp_path / "early").exists()
    second = _cli(*audit)  # resolved: Paris, Everest, Nile; the verdicts on Lyon, 8000 metres, eight and south wait
    assert second.exit_code == 2 and "judge prompts without an answer: 4," in second.stderr
    assert _split(run, tmp_path / "verdicts", shares=2, seed=1).exit_code == 0
    # the annotators hand back answered copies under other names, elsewhere
    returned = []
    for k in (1, 2):
        copy = tmp_path / "returned" / f"annotator-{k}.jsonl"
        copy.parent.mkdir(exist_ok=True)
        copy.write_bytes((tmp_path / "verdicts" / f"share-{k}.jsonl").read_bytes())
        returned.append(copy)
    _answer(returned, lambda prompt: "No")
    result = _fill(run, tmp_path / "verdicts", *returned)
    assert result.exit_code == 0, result.stderr
    third = _cli(*audit)
    assert third.exit_code == 0, third.stderr
    judged = {
        json.loads(line)["question"]: json.loads(line)
        for p in sorted(_sheet(run).parent.glob("step-*.jsonl"))
        for line in p.read_text().splitlines()
    }
    assert judged["Which city is the capital of France?"]["reference"]["answer"] == "Paris"
    assert [(r["correct"], r["by"]) for r in judged["Which city is the capital of France?"]["responses"]] == [
        (True, "label"),
        (False, "judge"),
    ]
    everest = judged["How high is Mount Everest?"]
    assert everest["label"] == {"correct": False, "by": "judge"} and [r["by"] for r in everest["responses"]] == ["match", "judge"]
    assert judged["Which mission landed on the Moon?"]["reference"]["status"] == "unresolved"
    assert all(r["output"] is not None for r in _rows(_sheet(run)))
    again = _fill(run, tmp_path / "verdicts", *returned)  # those prompts are answered now
    assert again.exit_code == 2 and "4 of its 4 prompts answered meanwhile" in again.stderr


def test_answers_the_audit_would_misread_are_refused_and_the_sheet_stays_as_it_was(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    audit = [str(run), "--judge", "sheet:annotator"]
    _cli(*audit)
    sheet = _sheet(run)
    rows = _rows(sheet)  # Paris's reference answered in the sheet itself: its verdict on Lyon waits beside three references
    sheet.write_text(
        "".join(json.dumps(r | {"output": REFERENCES[_asked(r["prompt"])]} if "France" in r["prompt"] else r) + "\n" for r in rows)
    )
    assert _cli(*audit).exit_code == 2
    split = tmp_path / "split"
    assert _split(run, split, shares=2).exit_code == 0
    before = sheet.read_bytes()
    ids = {r["prompt"]: (path.name, r["id"]) for path in split.glob("share-*.jsonl") for r in _rows(path)}

    def slips(everest: str):
        def answer(prompt: str) -> str | None:
            if "Candidate answer: Lyon" in prompt:
                return "Maybe"
            question = _asked(prompt)
            return {"How high is Mount Everest?": everest, "Which way does the Nile flow?": None}.get(question, REFERENCES[question])

        return answer

    for everest, reason in [
        ("<quote>Its height is 8000 metres.</quote><reference>8000 metres</reference>", "the quote is in none of the evidence documents"),
        ("<quote>8849</quote><reference>8849 metres</reference>", "the quote is under 3 words and does not hold the answer"),
        ("<quote>Its height is 8849 metres</quote> 8849 metres", "no <reference> answer"),
    ]:
        _answer(split.glob("share-*.jsonl"), slips(everest))
        result = _fill(run, split)
        assert result.exit_code == 2
        lines = result.stderr.splitlines()
        [everest_id] = [i for p, (_, i) in ids.items() if "Question: How high" in p]
        [lyon_id] = [i for p, (_, i) in ids.items() if "Candidate answer: Lyon" in p]
        [nile] = [(name, i) for p, (name, i) in ids.items() if "Question: Which way" in p]
        assert [line for line in lines if f"id {everest_id}: {reason};" in line and "share-" in line]
        assert [line for line in lines if f"id {lyon_id}: the verdict reads neither yes nor no" in line]
        assert [line for line in lines if line.startswith(f"{split / nile[0]}:") and line.endswith(f": id {nile[1]}: no answer")]
        assert "3 problems in the answers to 4 prompts" in lines[-1] and len(lines) == 4  # the unresolved Moon is no problem
        assert sheet.read_bytes() == before
    # an id the split never dealt, and one answered twice
    _answer(split.glob("share-*.jsonl"), lambda prompt: "no" if "Candidate" in prompt else REFERENCES[_asked(prompt)])
    stray = tmp_path / "stray.jsonl"
    stray.write_text(json.dumps({"id": "ffffffff", "prompt": "?", "output": "yes"}) + "\n" + (split / "share-1.jsonl").read_text())
    result = _fill(run, split, stray, split / "share-1.jsonl", split / "share-2.jsonl")
    assert result.exit_code == 2 and f"{stray}:1: id 'ffffffff' is not in this split" in result.stderr
    assert "answered twice (first at" in result.stderr and sheet.read_bytes() == before
    # a prompt answered in the sheet meanwhile: the split is stale, nothing of it is written
    rows = _rows(sheet)
    sheet.write_text("".join(json.dumps(r | {"output": "yes"} if "Candidate answer: Lyon" in r["prompt"] else r) + "\n" for r in rows))
    before = sheet.read_bytes()
    result = _fill(run, split)
    assert result.exit_code == 2 and "the split no longer matches" in result.stderr
    assert "1 of its 4 prompts answered meanwhile, 3 prompts waiting now); split the sheet again" in " ".join(result.stderr.split())
    assert sheet.read_bytes() == before


def test_splits_refused_leave_nothing_behind(tmp_path):
    run = make_run(tmp_path / "run", cases=CASES)
    out = tmp_path / "split"
    result = _split(run, out)
    assert result.exit_code == 2 and "no such sheet; run `cfbench audit" in result.stderr and not out.exists()
    _cli(str(run), "--judge", "sheet:annotator")
    for shares, message in [("0", "Invalid value for '--shares'"), ("5", "--shares 5: only 4 prompts wait")]:
        result = _split(run, out, shares=shares)
        assert result.exit_code == 2 and message in result.stderr and not out.exists()
    result = _cli("split-sheet", str(run), "--judge", "reference", "--shares", "1", "--out", str(out))
    assert result.exit_code == 2 and "are for sheet:NAME judges" in result.stderr and not out.exists()
    assert _split(run, out).exit_code == 0
    split = {p.name: p.read_bytes() for p in out.iterdir()}
    result = _split(run, out, seed=1)
    assert result.exit_code == 2 and f"{out}: already holds a split" in result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == split
    # a split of another run's sheet, or a directory that holds none, is not filled
    other = make_run(tmp_path / "other", cases=CASES)
    _cli(str(other), "--judge", "sheet:annotator")
    before = _sheet(other).read_bytes()
    result = _fill(other, out)
    assert result.exit_code == 2 and f"a split of {_sheet(run).resolve()}, not of" in result.stderr
    result = _fill(other, tmp_path)
    assert result.exit_code == 2 and "no manifest.json; pass the --out directory" in result.stderr
    assert _sheet(other).read_bytes() == before
    # every prompt answered: nothing to split
    _answer([_sheet(run)], lambda prompt: "<reference>unresolved</reference>")
    result = _split(run, tmp_path / "none")
    assert result.exit_code == 2 and "no prompt waits for an answer" in result.stderr and not (tmp_path / "none").exists()
