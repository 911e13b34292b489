import gzip

import pytest

from cfbench.harness.corpus import load_corpus
from cfbench.harness.errors import CfbenchError


def test_both_row_forms_become_search_r1_contents(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": "a", "contents": "\\"T1\\"\\nfirst"}\n{"id": 7, "title": "T2", "text": "second"}\n'))
    corpus = load_corpus(path)
    assert corpus.ids == ("a", "7")
    assert corpus.contents == ('"T1"\nfirst', '"T2"\nsecond')


@pytest.mark.parametrize(
    "content,message",
    [
        (b'{"id": "a", "contents": "x"}\n{"id": "b", "title": "t"}\n', r"c.jsonl:2: missing field 'contents'"),
        (b'{"contents": "x"}\n', r"c.jsonl:1: missing field 'id'"),
        (b'{"id": "a", "contents": "x"}\n{"id": \n', r"c.jsonl:2: not valid JSON"),
        (b'{"id": "a", "contents": "caf\xe9"}\n', r"c.jsonl:1: not UTF-8"),
        (b"\n", r"c.jsonl: the corpus has no passages"),
    ],
)
def test_bad_corpus_rows_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "c.jsonl"
    path.write_bytes(content)
    with pytest.raises(CfbenchError, match=message):
        load_corpus(path)
