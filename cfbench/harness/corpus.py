"""Passage corpora in either common form, normalised to Search-R1's `{"id", "contents"}`.

`contents` is `"Title"\\ntext`: the first line is the title, the rest the text. Rows in the form
`{"id", "title", "text"}` are converted to it on load.

`Passages` streams a corpus file a line at a time (what an index build of a wiki-18-sized corpus
needs: its 21M passages do not fit in memory as strings); `load_corpus` holds all of it, for retrievers
that return passages' text.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import BUNDLED_CORPUS


@dataclass(frozen=True)
class Corpus:
    path: Path
    sha256: str
    ids: tuple[str, ...]
    contents: tuple[str, ...]


class Passages:
    """A corpus file read as a stream: iterate for (id, contents); after a whole pass `sha256` (of the decompressed
    bytes, as Corpus.sha256) and `n` describe the file."""

    def __init__(self, path: Path) -> None:
        self.path, self.sha256, self.n = path, "", 0

    def __iter__(self) -> Iterator[tuple[str, str]]:
        if not self.path.is_file():
            raise CfbenchError(f"{self.path}: file not found")
        digest, n = hashlib.sha256(), 0
        opener = gzip.open if self.path.suffix == ".gz" else open
        with opener(self.path, "rb") as f:
            for lineno, row in jsonl.iter_rows(self.path, _hashed(f, digest)):
                yield _passage(self.path, lineno, row)
                n += 1
        if not n:
            raise CfbenchError(f"{self.path}: the corpus has no passages")
        self.sha256, self.n = digest.hexdigest(), n


def load_corpus(path: Path = BUNDLED_CORPUS) -> Corpus:
    passages = Passages(path)
    ids: list[str] = []
    contents: list[str] = []
    for pid, text in passages:
        ids.append(pid)
        contents.append(text)
    return Corpus(path, passages.sha256, tuple(ids), tuple(contents))


def _passage(path: Path, lineno: int, row: dict) -> tuple[str, str]:
    pid = row.get("id")
    if pid is None or isinstance(pid, (dict, list)):
        raise CfbenchError(f"{path}:{lineno}: missing field 'id' (rows need id + contents, or id + title + text)")
    if isinstance(row.get("contents"), str):
        return str(pid), row["contents"]
    if isinstance(row.get("title"), str) and isinstance(row.get("text"), str):
        return str(pid), f'"{row["title"]}"\n{row["text"]}'
    raise CfbenchError(f"{path}:{lineno}: missing field 'contents' (rows need id + contents, or id + title + text)")


def _hashed(lines, digest) -> Iterator[bytes]:
    """Each line without its newline, every byte read added to `digest`."""
    for line in lines:
        digest.update(line)
        yield line.rstrip(b"\n")


def split_contents(contents: str) -> tuple[str, str]:
    """(title, text): the first line, and the rest."""
    title, _, text = contents.partition("\n")
    return title, text
