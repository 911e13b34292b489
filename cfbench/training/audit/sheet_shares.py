"""`cfbench audit split-sheet` and `fill-sheet`: a sheet judge's waiting prompts dealt to several annotators, their answers merged back.

The prompts a split deals are the audit's waiting set: the prompts the audit of RUN asks now that have a row with no
output in RUN/judged/sheet-NAME/sheet.jsonl (rows of questions a resumed run has since replaced are left out: the
audit never reads them). They are shuffled with the seed and dealt in turn into K share files DIR/share-k.jsonl of
rows {id, prompt, output: null}. An id is opaque (drawn from the seed, unique across the split), so neither the order
nor the id tells an annotator which run, step or question a prompt is about. DIR/manifest.json maps each id back to its
sheet key and holds the sha256 of the waiting set the split was dealt from.

fill-sheet reads the answers back and checks each the way the audit will read it: a reference answer must parse
(judge.parse_reference, against the documents of the question its prompt asks about) to a resolved reference or to the
explicit "unresolved" the prompt allows, and a verdict must read yes or no (judge.parse_verdict); anything else the
audit would count as a failed judgement through an annotator's slip. A missing answer, an unknown or repeated id and a
split whose waiting set is no longer the sheet's (answered meanwhile, or other prompts waiting since) are refused too.
All or none: one line per problem and sheet.jsonl untouched, or every answer written into it at once.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.training.audit.audit import CACHE_FILE, judge_rows, out_dir, run_config, saved_steps
from cfbench.training.audit.judge import (
    NO_SUPPORT,
    REFERENCE_TOKENS,
    JudgeCache,
    SheetJudge,
    documents,
    judge_for,
    judged_dir,
    parse_reference,
    parse_verdict,
    read_sheet,
    reference_prompt,
)
from cfbench.training.selfevolve.sources import corpus_path

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Waiting:
    """What the audit of a run waits on from a sheet judge."""

    sheet: Path
    rows: dict[str, dict]  # the sheet's rows by key, as on file
    keys: list[str]  # the waiting set: prompts the audit asks now with no output in the sheet, sorted
    unwritten: int  # prompts the audit asks that the sheet does not hold yet
    unused: int  # rows without an output that no question asks now
    documents: dict[str, list[str]]  # reference prompt key -> the documents of the question it asks about

    @property
    def sha256(self) -> str:
        return hashlib.sha256("\n".join(self.keys).encode()).hexdigest()


def waiting(run: Path, spec: str) -> Waiting:
    """Judge the run's saved steps with the sheet as it is, writing nothing, to find the prompts the audit waits on."""
    if not spec.startswith("sheet:"):
        raise CfbenchError(f"--judge {spec!r}: split-sheet and fill-sheet are for sheet:NAME judges")
    judge: SheetJudge = judge_for(spec, corpus_path(run_config(run)), judged_dir(run, spec) / CACHE_FILE)
    if not judge.path.is_file():
        raise CfbenchError(f"{judge.path}: no such sheet; run `cfbench audit {run} --judge {spec}` first to write its prompts")
    docs = {}
    for _, rows in saved_steps(run):
        for q in judge_rows(rows, judge):
            docs[JudgeCache.key(judge.identity, reference_prompt(documents(q), q["question"]), REFERENCE_TOKENS)] = documents(q)
    on_file = read_sheet(judge.path)
    return Waiting(
        sheet=judge.path,
        rows=on_file,
        keys=sorted(k for k in judge.asked if k in on_file and on_file[k]["output"] is None),
        unwritten=len(judge.asked - on_file.keys()),
        unused=sum(row["output"] is None for key, row in on_file.items() if key not in judge.asked),
        documents=docs,
    )


def split_sheet(run: Path, spec: str, shares: int, seed: int, out: Path) -> dict:
    """Deal the waiting set into `shares` (at least 1) share files in `out`; returns the manifest."""
    state = waiting(run, spec)
    if state.unwritten:
        raise CfbenchError(
            f"{state.sheet}: the audit asks {state.unwritten} prompts the sheet does not hold yet; "
            f"run `cfbench audit {run} --judge {spec}` to write them, then split"
        )
    if not state.keys:
        raise CfbenchError(f"{state.sheet}: no prompt waits for an answer; run `cfbench audit {run} --judge {spec}` to go on")
    if shares > len(state.keys):
        raise CfbenchError(f"--shares {shares}: only {len(state.keys)} prompts wait in {state.sheet}; deal into at most {len(state.keys)}")
    if (out / MANIFEST).exists() or list(out.glob("share-*.jsonl")):
        raise CfbenchError(f"{out}: already holds a split; pass a new --out directory")
    rng = random.Random(seed)
    order = list(state.keys)
    rng.shuffle(order)
    ids = [f"{n:08x}" for n in rng.sample(range(16**8), len(order))]
    dealt = {f"share-{k + 1}.jsonl": dict(zip(ids[k::shares], order[k::shares])) for k in range(shares)}
    manifest = {
        "judge": spec,
        "sheet": str(state.sheet.resolve()),
        "seed": seed,
        "prompts": len(order),
        "unused_rows": state.unused,
        "waiting_sha256": state.sha256,
        "shares": dealt,  # share file -> {id: sheet key}
    }
    out_dir(out, "--out")
    for name, keys in dealt.items():
        jsonl.write_jsonl(out / name, ({"id": i, "prompt": state.rows[key]["prompt"], "output": None} for i, key in keys.items()))
    jsonl.write_atomic(out / MANIFEST, jsonl.json_text(manifest))  # last: a directory with a manifest holds a whole split
    return manifest


class AnswersRefused(CfbenchError):
    """Answers fill-sheet will not write: one line per problem in `problems`."""

    def __init__(self, problems: list[str], total: int, sheet: Path) -> None:
        self.problems = problems
        super().__init__(
            f"{len(problems)} problems in the answers to {total} prompts; {sheet} is unchanged: "
            "correct the answers listed and run the same command again"
        )


def fill_sheet(run: Path, spec: str, split: Path, answer_files: list[Path]) -> int:
    """Check every answer of the split in `split` (read from `answer_files`, default its share files) and write them
    all into the sheet, or none; returns how many were written."""
    path, manifest, dealt = _read_split(split)
    state = waiting(run, spec)
    if Path(manifest["sheet"]) != state.sheet.resolve():
        raise CfbenchError(f"{path}: a split of {manifest['sheet']}, not of {state.sheet}; pass the split of this run's sheet")
    if manifest["waiting_sha256"] != state.sha256:
        answered = sum(state.rows.get(key, {}).get("output") is not None for _, key in dealt.values())
        raise CfbenchError(
            f"{path}: the split no longer matches {state.sheet} ({answered} of its {len(dealt)} prompts answered meanwhile, "
            f"{len(state.keys)} prompts waiting now); split the sheet again into a new directory"
        )
    answers, problems, seen = {}, [], {}
    for file in answer_files or [split / name for name in manifest["shares"]]:
        for lineno, row in jsonl.iter_rows(file, jsonl.read_bytes(file)):
            where, i = f"{file}:{lineno}", row.get("id")
            if i not in dealt:
                problems.append(f"{where}: id {i!r} is not in this split")
            elif i in seen:
                problems.append(f"{where}: id {i} answered twice (first at {seen[i]})")
            else:
                seen[i] = where
                problem = _check(row.get("output"), state.documents.get(dealt[i][1]))
                if problem:
                    problems.append(f"{where}: id {i}: {problem}")
                answers[dealt[i][1]] = row.get("output")
    problems += [f"{split / name}: id {i}: no answer" for i, (name, _) in dealt.items() if i not in seen]
    if problems:
        raise AnswersRefused(problems, len(dealt), state.sheet)
    for key, output in answers.items():
        state.rows[key]["output"] = output
    jsonl.write_jsonl(state.sheet, state.rows.values())
    return len(answers)


def _read_split(split: Path) -> tuple[Path, dict, dict[str, tuple[str, str]]]:
    """The split's manifest path, the manifest, and id -> (share file, sheet key)."""
    path = split / MANIFEST
    if not path.is_file():
        raise CfbenchError(f"{split}: no {MANIFEST}; pass the --out directory of `cfbench audit split-sheet`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        dealt = {i: (name, key) for name, keys in manifest["shares"].items() for i, key in keys.items()}
        if not isinstance(manifest["sheet"], str) or not isinstance(manifest["waiting_sha256"], str):
            raise TypeError
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise CfbenchError(f"{path}: not a split manifest; split the sheet again into a new directory") from None
    return path, manifest, dealt


def _check(output, docs: list[str] | None) -> str | None:
    """What is wrong with an answer as the audit will read it (`docs`: the documents of a reference prompt, None for a
    verdict prompt), or None."""
    if not isinstance(output, str) or not output.strip():
        return "no answer"
    if docs is None:
        return None if parse_verdict(output) is not None else "the verdict reads neither yes nor no; write yes or no"
    ref = parse_reference(output, docs)
    if ref.status == "resolved" or ref.reason == NO_SUPPORT:
        return None
    return f"{ref.reason}; write <quote>words of one document</quote><reference>answer</reference>, or <reference>unresolved</reference>"
