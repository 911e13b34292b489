"""Suites and training sets share one question rule set (cfbench.harness.suite.checked_questions): the same row
is accepted or refused by both, with the same one-line error naming file:line, field and value."""

import pytest

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.suite import load_suite
from cfbench.training.core.data import load_train_set

GOOD = '{"id": "q0", "question": "q", "golden_answers": ["a"]}'

LOADERS = {"suite": (load_suite, "benchmark"), "training set": (load_train_set, "source")}


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    "line,message",
    [
        (
            '{"id": "q1", "question": "who?", "golden_answers": [" "]}',
            r"^\S*x.jsonl:2: field 'golden_answers' must be a non-empty list of non-blank strings, got \[' '\]; fix or remove the row$",
        ),
        ('{"id": "q1", "question": "who?", "golden_answers": []}', r"x.jsonl:2: field 'golden_answers' .*, got \[\];"),
        ('{"id": "q1", "question": "who?"}', r"x.jsonl:2: field 'golden_answers' .*, got None;"),
        ('{"id": "q1", "question": "who?", "golden_answers": "a"}', r"x.jsonl:2: field 'golden_answers' .*, got 'a';"),
        ('{"id": "q1", "question": "who?", "golden_answers": ["a", 2]}', r"x.jsonl:2: field 'golden_answers' .*, got \['a', 2\];"),
        (
            '{"question": "who?", "golden_answers": ["a"]}',
            r"^\S*x.jsonl:2: field 'id' must be a non-blank string, got None; fix or remove the row$",
        ),
        ('{"id": 3, "question": "q", "golden_answers": ["a"]}', r"x.jsonl:2: field 'id' must be a non-blank string, got 3;"),
        ('{"id": " ", "question": "q", "golden_answers": ["a"]}', r"x.jsonl:2: field 'id' must be a non-blank string, got ' ';"),
        ('{"id": "q1", "question": " ", "golden_answers": ["a"]}', r"x.jsonl:2: field 'question' must be a non-blank string, got ' ';"),
        (GOOD, r"^\S*x.jsonl:2: duplicate id 'q0' \(first at \S*x.jsonl:1\); give each question its own id$"),
        ('{"id": "q1", "question": "q"', r"x.jsonl:2: not valid JSON"),
        ('["a list"]', r"x.jsonl:2: expected a JSON object, got list"),
    ],
)
def test_a_bad_row_is_refused_by_both_loaders_in_one_line(tmp_path, loader, line, message):
    path = tmp_path / "x.jsonl"
    path.write_text(GOOD + "\n" + line + "\n")
    with pytest.raises(CfbenchError, match=message) as err:
        LOADERS[loader][0](str(path))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("loader", LOADERS)
def test_the_group_field_is_checked_under_its_own_name(tmp_path, loader):
    load, group = LOADERS[loader]
    path = tmp_path / "x.jsonl"
    path.write_text(f'{{"id": "q1", "question": "q", "golden_answers": ["a"], "{group}": ""}}\n')
    with pytest.raises(CfbenchError, match=rf"x.jsonl:1: field '{group}' must be a non-blank string, got '';"):
        load(str(path))


@pytest.mark.parametrize("loader", LOADERS)
def test_an_empty_file_names_what_it_should_have_held(tmp_path, loader):
    path = tmp_path / "x.jsonl"
    path.write_text("\n")
    with pytest.raises(CfbenchError, match=rf"x.jsonl: the {loader} has no questions$"):
        LOADERS[loader][0](str(path))


def test_a_valid_row_reads_the_same_through_both(tmp_path):
    """The bundled mini suite's questions (without the provenance that bundled rows keep in `source`), read as a
    suite and as a training set, give the same questions."""
    mini = load_suite("mini").questions
    path = tmp_path / "mine.jsonl"
    jsonl.write_jsonl(path, ({"id": q.id, "question": q.question, "golden_answers": list(q.golden_answers)} for q in mini))
    suite, train = load_suite(str(path)).questions, load_train_set(str(path))
    assert (
        [(q.id, q.benchmark, q.question, q.golden_answers) for q in suite]
        == [(q.id, q.benchmark, q.question, q.golden_answers) for q in train]
        == [(q.id, "mine", q.question, q.golden_answers) for q in mini]
    )
