"""`cfbench audit rename-judge OLD NEW PATHS...`: give a sheet judge's stored answers another name.

A sheet judge's name is part of everything it stored: the folder its answers live in
(RUN/judged/sheet-NAME/), the key of every sheet row (sha256 of [judge identity, prompt, token
budget], judge.JudgeCache.key) and the judge identity that audit.json, replay records and reports
name. Renaming by hand would leave the keys on the old name, so the next audit would ask every prompt
again. This rewrites all three in place, so the old answers read under the new name:

- every folder named sheet-OLD below PATHS is renamed sheet-NEW;
- every sheet.jsonl row keyed under the old identity is re-keyed under the new one (its prompt,
  budget and answer unchanged); rows keyed otherwise are refused, as they belong to no judge named here;
- in every .json, .jsonl, .md and .csv file below PATHS, the exact tokens `sheet:OLD` and `sheet-OLD`
  (the identity and the folder name inside paths) become `sheet:NEW` and `sheet-NEW`.

Everything is checked and computed before the first file changes; a second run finds nothing to do.
Reports rendered as images (trajectory.png) are not rewritten: rerun `cfbench audit ... --report` for them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import dumps, write_atomic
from cfbench.training.audit.judge import SHEET_FILE, JudgeCache, slug

TEXT_SUFFIXES = (".json", ".jsonl", ".md", ".csv")


def rename_sheet_judge(old: str, new: str, paths: list[Path]) -> dict[str, int]:
    """Rename judge `old` (sheet:NAME) to `new` below paths; returns counts of what changed."""
    for spec in (old, new):
        if not re.fullmatch(r"sheet:[A-Za-z0-9_.-]+", spec):
            raise CfbenchError(f"{spec!r}: rename-judge renames sheet judges; write sheet:NAME (letters, digits, ._-)")
    if old == new:
        raise CfbenchError(f"{old}: the old and new names are the same")
    old_dir, new_dir = slug(old), slug(new)
    tokens = [(old, new), (old_dir, new_dir)]
    folders = sorted({p for root in paths for p in root.rglob(old_dir) if p.is_dir()}, key=lambda p: len(p.parts), reverse=True)
    for folder in folders:
        if folder.with_name(new_dir).exists():
            raise CfbenchError(f"{folder.with_name(new_dir)}: already exists; rename-judge will not merge two judges' answers")
    files = sorted({p for root in paths for p in root.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES})
    rewritten: dict[Path, str] = {}
    rekeyed = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        again = text
        for a, b in tokens:
            again = re.sub(rf"(?<![A-Za-z0-9_.-]){re.escape(a)}(?![A-Za-z0-9_-]|\.[A-Za-z0-9_-])", b, again)
        if path.name == SHEET_FILE:
            again, n = _rekey(path, again, old, new)
            rekeyed += n
        if again != text:
            rewritten[path] = again
    for path, text in rewritten.items():
        write_atomic(path, text)
    for folder in folders:
        folder.rename(folder.with_name(new_dir))
    return {"folders": len(folders), "files": len(rewritten), "rekeyed": rekeyed}


def _rekey(path: Path, text: str, old: str, new: str) -> tuple[str, int]:
    """The sheet's rows with keys under `new` for every row keyed under `old`."""
    lines, n = [], 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        budget, prompt = row.get("max_tokens"), row.get("prompt")
        if row.get("key") == JudgeCache.key(old, prompt, budget):
            row["key"], n = JudgeCache.key(new, prompt, budget), n + 1
        elif row.get("key") != JudgeCache.key(new, prompt, budget):
            raise CfbenchError(f"{path}:{lineno}: a row keyed under neither {old} nor {new}; this sheet is another judge's")
        lines.append(dumps(row))
    return "".join(line + "\n" for line in lines), n
