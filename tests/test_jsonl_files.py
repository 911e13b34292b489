"""The shared file helpers: one JSON rule, atomic files and directories."""

import json

import pytest

from cfbench.harness import jsonl


def test_one_rule_keeps_non_ascii_as_utf8_and_sorts_keys(tmp_path):
    path = tmp_path / "rows.jsonl"
    jsonl.write_jsonl(path, [{"q": "Wer schrieb „Faust“?", "id": "a"}, {"b": 1, "a": "東京"}])
    assert path.read_bytes() == '{"id": "a", "q": "Wer schrieb „Faust“?"}\n{"a": "東京", "b": 1}\n'.encode()
    assert [row for _, row in jsonl.iter_rows(path, path.read_bytes())] == [{"id": "a", "q": "Wer schrieb „Faust“?"}, {"a": "東京", "b": 1}]
    assert jsonl.json_text({"b": "é", "a": 1}) == '{\n  "a": 1,\n  "b": "é"\n}\n'


def test_append_adds_rows_after_the_existing_ones(tmp_path):
    path = tmp_path / "log.jsonl"
    jsonl.append_jsonl(path, [{"step": 1}])
    jsonl.append_jsonl(path, ({"step": s} for s in (2, 3)))
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("old")
    jsonl.write_atomic(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_atomic_dir_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "index"
    with pytest.raises(RuntimeError), jsonl.atomic_dir(target) as tmp:
        (tmp / "part").write_text("half")
        raise RuntimeError("build failed")
    assert list(tmp_path.iterdir()) == []  # neither target nor the scratch directory

    with jsonl.atomic_dir(target) as tmp:
        (tmp / "part").write_text("whole")
        assert not target.exists()
    assert (target / "part").read_text() == "whole"
    assert oct(target.stat().st_mode & 0o777) == "0o755"
    assert [p.name for p in tmp_path.iterdir()] == ["index"]

    with jsonl.atomic_dir(target, replace=True) as tmp:
        (tmp / "other").write_text("new")
    assert [p.name for p in target.iterdir()] == ["other"]
