"""Passage corpora in either common form, normalised to Search-R1's `{"id", "contents"}`.

`contents` is `"Title"\\ntext`: the first line is the title, the rest the text. Rows in the form
`{"id", "title", "text"}` are converted to it on load.
"""

from __future__ import annotations

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


def load_corpus(path: Path = BUNDLED_CORPUS) -> Corpus:
    data = jsonl.read_bytes(path)
    ids: list[str] = []
    contents: list[str] = []
    for lineno, row in jsonl.iter_rows(path, data):
        pid = row.get("id")
        if pid is None or isinstance(pid, (dict, list)):
            raise CfbenchError(f"{path}:{lineno}: missing field 'id' (rows need id + contents, or id + title + text)")
        if isinstance(row.get("contents"), str):
            text = row["contents"]
        elif isinstance(row.get("title"), str) and isinstance(row.get("text"), str):
            text = f'"{row["title"]}"\n{row["text"]}'
        else:
            raise CfbenchError(f"{path}:{lineno}: missing field 'contents' (rows need id + contents, or id + title + text)")
        ids.append(str(pid))
        contents.append(text)
    if not ids:
        raise CfbenchError(f"{path}: the corpus has no passages")
    return Corpus(path, jsonl.sha256(data), tuple(ids), tuple(contents))


def split_contents(contents: str) -> tuple[str, str]:
    """(title, text): the first line, and the rest."""
    title, _, text = contents.partition("\n")
    return title, text
