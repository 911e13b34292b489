import gzip
import hashlib

import pytest

from cfbench.harness.corpus import Passages, load_corpus
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


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_streamed_corpus_hashes_and_reads_as_the_loaded_one(tmp_path, suffix):
    """What a lucene build streams (wiki-18's path) is what load_corpus holds: the same passages, hash and count,
    blank lines and a missing final newline included."""
    text = b'{"id": "a", "contents": "\\"T1\\"\\nfirst"}\n\n{"id": 7, "title": "T2", "text": "second"}\r\n{"id": "c", "contents": "x"}'
    path = tmp_path / f"c{suffix}"
    path.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
    passages = Passages(path)
    streamed = list(passages)
    corpus = load_corpus(path)
    assert streamed == list(zip(corpus.ids, corpus.contents)) == [("a", '"T1"\nfirst'), ("7", '"T2"\nsecond'), ("c", "x")]
    assert passages.sha256 == corpus.sha256 == hashlib.sha256(text).hexdigest() and passages.n == 3
    assert list(passages) == streamed and passages.n == 3  # a second pass reads the file again, counting afresh


def test_a_streamed_corpus_names_its_bad_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"id": "a", "contents": "x"}\n{"id": "b"}\n')
    with pytest.raises(CfbenchError, match=r"c.jsonl:2: missing field 'contents'"):
        list(Passages(path))
    with pytest.raises(CfbenchError, match=r"nothing.jsonl: file not found"):
        list(Passages(tmp_path / "nothing.jsonl"))
