"""The audit's judge: an evidence-backed reference answer from the source, then a verdict on each answer.

`--judge` takes one of
    openai:MODEL@URL    an OpenAI-compatible chat endpoint (vLLM, `cfbench serve-model`), greedy
    openai:MODEL        the hosted OpenAI API (key from --api-key or OPENAI_API_KEY)
    hf:MODEL_OR_DIR     a local checkpoint, bundled model or hub id, in process, greedy
    sheet:NAME          answers NAME (a person, or a judge cfbench cannot call) writes into a sheet file
    reference           gold answers from the run's corpus rows (`answers` or `golden_answers`)

An LLM judge first reads the evidence, the source and then each passage the proposer retrieved while
writing the question (marked [S], [P1], [P2], ... in retrieval order: a 2-4-hop question needs them),
and the question, and must copy the supporting span into `<quote>` and the short answer into
`<reference>`. The reference is "unresolved" when the judge says so, gives no answer, quotes
nothing, quotes text that is in none of the marked documents (compared case-insensitively with
whitespace collapsed), quotes fewer than 3 words that do not hold its answer as whole words (Cover-EM),
or answers with what normalisation empties ("the"). A resolved
reference records which document the quote came from (`quote_from`: 0 the source, k the k-th
retrieved passage; the first that holds it). Then it answers yes/no for the adopted label and each solver response against the reference
(the audit gives a response that matches the label the label's verdict); an empty answer is wrong and
an answer equal to the reference under normalised exact match is right without a request; an
unreadable verdict leaves the pair unresolved. The `reference` judge takes the first gold answer
found, as whole words, in a sentence of the source text, else of the retrieved passages in order
(the quote is that sentence; none found: unresolved) and calls an answer right when it matches any
gold answer under normalised exact match.

A gold answer belongs to the source, not to the proposer's question: the `reference` judge is for
labelled corpora built so that each source has one answer to ask about, and for tests.

LLM calls are cached by their exact inputs (judge identity, prompt, token limit) in an append-only
JSONL file, written after every batch of 16, so a rerun or a resumed audit sends only what is missing.
A `sheet:` judge is asked through a file instead (`sheet.jsonl` in the judge's directory, its only store):
the audit writes every prompt it has no answer for as a row {key, prompt, max_tokens, output: null} and
stops; NAME writes each `output` exactly as the prompt asks (the same quote check applies), and the same
command continues. The references come first, so a judged run takes two rounds of answers: references,
then verdicts. `cfbench audit split-sheet` and `fill-sheet` (sheet_shares.py) deal a round to several annotators
and check their answers as parse_reference and parse_verdict will read them before any enters the sheet.
The identity of an `openai:` judge is its model name (plus its reasoning effort and output-token budget when
set): serve different weights under different names. `openai:` judges go through the `openai` SDK
(harness.openai_client). A reasoning effort is sent as the API's `reasoning_effort` with no temperature (reasoning
models take none); a max output tokens budget replaces the per-prompt limits, since a reasoning model spends
its budget on thinking before the few answer tokens.
Thinking blocks (`<think>...</think>`) are stripped before parsing, and the last tagged span counts.
"""

from __future__ import annotations

import hashlib
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.metrics import normalize, score
from cfbench.harness.paths import portable
from cfbench.harness.runrecord import write_atomic
from cfbench.training.core.answers import matches

REFERENCE_TOKENS = 192
VERDICT_TOKENS = 8
CHUNK = 16  # judge prompts per batch; each batch's answers are cached as soon as it returns
SHEET_FILE = "sheet.jsonl"  # a sheet: judge's prompts and answers, in its judged/ directory
MIN_QUOTE_WORDS = 3  # a shorter quote must contain the answer to count as support
NO_SUPPORT = "the judge found no support in the evidence"  # the reason of an explicit <reference>unresolved</reference>
_QUOTE = re.compile(r"<quote>(.*?)</quote>", re.DOTALL)
_REFERENCE = re.compile(r"<reference>(.*?)</reference>", re.DOTALL)
_THINKING = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Reference:
    status: str  # "resolved" or "unresolved"
    answer: str | None
    quote: str | None
    reason: str | None  # why it is unresolved
    quote_from: int | None = None  # the evidence document holding the quote: 0 the source, k the k-th retrieved passage

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    correct: bool | None  # None: the judge's answer was unreadable
    by: str  # "judge", "match" (equals the reference), "empty", "gold"


def evidence_marks(documents: list[str]) -> list[str]:
    return ["S", *(f"P{k}" for k in range(1, len(documents)))]


def reference_prompt(documents: list[str], question: str) -> str:
    """`documents`: the source, then the proposer's retrieved passages in order (each `"Title"\ntext`)."""
    shown = []
    for mark, doc in zip(evidence_marks(documents), documents):
        title, _, text = doc.partition("\n")
        shown.append(f"[{mark}] {'Source document' if mark == 'S' else 'Retrieved passage'}: (Title: {title}) {text}")
    return (
        "\n".join(shown) + f"\n\nQuestion: {question}\n\n"
        "Answer the question using only the documents above. First copy the exact words of one document that "
        "support the answer between <quote> and </quote>, then write the short answer between <reference> and "
        "</reference>. If the documents do not answer the question, write <reference>unresolved</reference>."
    )


def verdict_prompt(question: str, reference: str, candidate: str) -> str:
    return (
        f"Question: {question}\nReference answer: {reference}\nCandidate answer: {candidate}\n\n"
        "Does the candidate answer mean the same as the reference answer? Reply with yes or no only."
    )


def _squash(text: str) -> str:
    return " ".join(text.lower().split())


def _last(pattern: re.Pattern, text: str) -> str:
    """The last tagged span (a judge that echoes the instructions first still ends with its own)."""
    found = pattern.findall(text)
    return found[-1].strip() if found else ""


def parse_reference(output: str, documents: list[str]) -> Reference:
    """The judge's reference from `output`; `documents` as for reference_prompt."""
    output = _THINKING.sub("", output)
    answer, quote = _last(_REFERENCE, output), _last(_QUOTE, output)
    if not answer:
        return Reference("unresolved", None, quote or None, "no <reference> answer")
    if normalize(answer) == "unresolved":
        return Reference("unresolved", None, quote or None, NO_SUPPORT)
    if not normalize(answer):  # "the", "?": nothing a response could be compared with
        return Reference("unresolved", answer, quote or None, "the reference is empty once normalised")
    if not quote:
        return Reference("unresolved", answer, None, "no <quote> of the evidence")
    found = next((k for k, doc in enumerate(documents) if _squash(quote) in _squash(doc)), None)
    if found is None:
        return Reference("unresolved", answer, quote, "the quote is in none of the evidence documents")
    # a short quote must hold the answer as whole words (Cover-EM): "1" is not held by "in 1990"
    if len(quote.split()) < MIN_QUOTE_WORDS and not score(quote, [answer])["cover_em"]:
        return Reference("unresolved", answer, quote, f"the quote is under {MIN_QUOTE_WORDS} words and does not hold the answer")
    return Reference("resolved", answer, quote, None, found)


def parse_verdict(output: str) -> bool | None:
    words = normalize(_THINKING.sub("", output)).split()
    return {"yes": True, "no": False}.get(words[0]) if words else None


class JudgeCache:
    """Judge outputs by the sha256 of their exact inputs, in an append-only JSONL file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.outputs: dict[str, str] = {}
        if not path.is_file():
            return
        text = path.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):  # a line torn by a crash mid-write: drop it (asked again), keep the rest
            text = text[: text.rfind("\n") + 1]
            write_atomic(path, text)
        for lineno, line in enumerate(text.splitlines(), start=1):
            try:
                row = json.loads(line)
                self.outputs[row["key"]] = row["output"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise CfbenchError(f"{path}:{lineno}: not a judge cache entry; delete the judge cache to rebuild it") from None

    @staticmethod
    def key(identity: str, prompt: str, max_tokens: int) -> str:
        return hashlib.sha256(json.dumps([identity, prompt, max_tokens]).encode()).hexdigest()

    def add(self, entries: dict[str, str]) -> None:
        self.outputs.update(entries)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        jsonl.append_jsonl(self.path, ({"key": k, "output": v} for k, v in entries.items()))


class _OpenAIChat:
    """Chat completions through the `openai` SDK, `concurrency` requests in flight: greedy unless a reasoning effort is set."""

    def __init__(
        self,
        model: str,
        url: str | None,
        *,
        api_key: str | None = None,
        reasoning_effort: str | None = None,
        max_output_tokens: int | None = None,
        concurrency: int = 4,
        timeout: float = 600.0,
        retries: int = 3,
    ) -> None:
        from cfbench.harness.openai_client import make_client

        self.model, self.concurrency, self.max_output_tokens = model, concurrency, max_output_tokens
        self._client = make_client(url and url.rstrip("/").removesuffix("/v1") + "/v1", api_key=api_key, timeout=timeout, retries=retries)
        self._knobs = {"reasoning_effort": reasoning_effort} if reasoning_effort else {"temperature": 0.0}
        if url and not reasoning_effort:  # vLLM: no thinking block (one is stripped if it comes anyway); the hosted API refuses the field
            self._knobs["extra_body"] = {"chat_template_kwargs": {"enable_thinking": False}}

    def ask(self, prompts: list[str], max_tokens: int) -> list[str]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda p: self._one(p, max_tokens), prompts))

    def _one(self, prompt: str, max_tokens: int) -> str:
        from cfbench.harness.openai_client import one_line_errors

        with one_line_errors("judge server", self._client):
            answer = self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": prompt}],
                max_completion_tokens=self.max_output_tokens or max_tokens,
                **self._knobs,
            )
        try:
            return answer.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError) as err:
            raise CfbenchError(f"judge server {self._client.base_url} answered in an unexpected form ({err!r})") from None


class _LocalChat:
    """Greedy chat completions from a model loaded in process (hf engine), loaded on first use."""

    def __init__(self, spec: str) -> None:
        self.spec, self._engine = spec, None

    def ask(self, prompts: list[str], max_tokens: int) -> list[str]:
        from cfbench.harness.backends.hf import HFBackend
        from cfbench.harness.checkpoints import resolve

        self._engine = self._engine or HFBackend.load(resolve(self.spec))
        ids = [self._engine.tokens.encode(self._engine.chat_prompt(p)) for p in prompts]
        return [c.text for c in self._engine.complete(ids, max_tokens, ())]


class LLMJudge:
    def __init__(self, kind: str, identity: str, chat, cache: JudgeCache) -> None:
        self.kind, self.identity, self.chat, self.cache = kind, identity, chat, cache
        self.needed = self.sent = 0  # prompts asked of the judge, and those not answered from the cache

    def describe(self) -> dict:
        return {
            "judge": self.kind,
            "identity": self.identity,
            "reference_tokens": REFERENCE_TOKENS,
            "verdict_tokens": VERDICT_TOKENS,
            **self._answers_from(),
        }

    def _answers_from(self) -> dict:
        return {"decoding": "greedy (temperature 0)", "cache": str(self.cache.path)}

    def waiting(self) -> int:
        """Prompts asked that have no answer yet: none for a judge that is called."""
        return 0

    def require_answers(self) -> None:
        """A judge that is called never waits for answers."""

    def _ask(self, prompts: list[str], max_tokens: int) -> list[str]:
        keys = [JudgeCache.key(self.identity, p, max_tokens) for p in prompts]
        missing = list({k: p for k, p in zip(keys, prompts) if k not in self.cache.outputs}.items())
        for first in range(0, len(missing), CHUNK):
            chunk = missing[first : first + CHUNK]
            self.cache.add(dict(zip([k for k, _ in chunk], self.chat.ask([p for _, p in chunk], max_tokens))))
        self.needed += len(prompts)
        self.sent += len(missing)
        return [self.cache.outputs[k] for k in keys]

    def references(self, rows: list[dict]) -> list[Reference]:
        outputs = self._ask([reference_prompt(documents(r), r["question"]) for r in rows], REFERENCE_TOKENS)
        return [parse_reference(out, documents(r)) for out, r in zip(outputs, rows)]

    def verdicts(self, items: list[tuple[dict, Reference, str]]) -> list[Verdict]:
        """(audited row, its resolved reference, candidate answer) -> verdict."""
        ruled = [_rule(ref.answer, candidate) for _, ref, candidate in items]
        asked = [verdict_prompt(row["question"], ref.answer, c) for (row, ref, c), v in zip(items, ruled) if v is None]
        answers = iter(self._ask(asked, VERDICT_TOKENS))
        return [v or Verdict(parse_verdict(next(answers)), "judge") for v in ruled]


class AnswersWaiting(CfbenchError):
    """Sheet judges with prompts to answer: (count, sheet) each, the prompts written into the sheets."""

    def __init__(self, waits: list[tuple[int, Path]]) -> None:
        self.waits = waits
        where = ", ".join(f"{count}, in {sheet}" for count, sheet in waits)
        super().__init__(
            f"judge prompts without an answer: {where}; write each row's output as its prompt asks, then run the same command again"
        )


class SheetJudge(LLMJudge):
    """`sheet:NAME`: the LLM judge's prompts, answered in a JSONL sheet by a person or a judge cfbench cannot call.

    Hand-written rather than a labelling tool's format: a row is one judge prompt and its answer, so the answers
    go through the same parsing and quote check as an LLM's. The sheet is this judge's only store (no cache), so
    an answer corrected in the sheet counts at the next audit. Only the prompts this audit asked can keep it
    waiting; rows of questions a resumed run has since replaced stay in the sheet, unused."""

    def __init__(self, identity: str, path: Path) -> None:
        self.kind, self.identity, self.path = "sheet", identity, path
        self.needed = self.sent = 0  # prompts asked, and those that had no answer yet
        self.rows = read_sheet(path)
        self.asked: set[str] = set()
        self.borrowed: dict[str, tuple[str, Path]] = {}  # key -> (output, the other sheet that has it)
        self.copied = 0

    def borrow(self, sheets: list[Path]) -> None:
        """Answer prompts this sheet has not answered with the answers other runs' sheets of this judge give the same
        prompt (the key covers judge, prompt and budget), the first sheet listed first. A copied answer is written
        into this sheet with `copied_from`, so this sheet stays the only store."""
        for sheet in sheets:
            for key, row in read_sheet(sheet, must_exist=True).items():
                if row["output"] is not None:
                    self.borrowed.setdefault(key, (row["output"], sheet))

    def _answers_from(self) -> dict:
        return {"decoding": f"answers written into {self.path}", "cache": str(self.path)}

    def _ask(self, prompts: list[str], max_tokens: int) -> list[str]:
        keys = [JudgeCache.key(self.identity, p, max_tokens) for p in prompts]
        for key, prompt in zip(keys, prompts):
            row = self.rows.setdefault(key, {"key": key, "prompt": prompt, "max_tokens": max_tokens, "output": None})
            if row["output"] is None and key in self.borrowed:
                row["output"], sheet = self.borrowed[key]
                row["copied_from"] = str(sheet)
                self.copied += 1
        self.asked.update(keys)
        outputs = [self.rows[k]["output"] for k in keys]
        self.needed += len(prompts)
        self.sent += outputs.count(None)
        return [out or "" for out in outputs]  # "" only while answers wait: require_answers stops before anything is written

    def waiting(self) -> int:
        return sum(self.rows[k]["output"] is None for k in self.asked)

    def require_answers(self) -> None:
        waiting = self.waiting()
        if waiting or self.copied:
            # answers written into the sheet since this judge read it (a replay trains for hours) are kept, not overwritten
            for key, row in read_sheet(self.path).items():
                if key not in self.rows or row["output"] is not None:
                    self.rows[key] = row
            jsonl.write_jsonl(self.path, self.rows.values())
        if waiting:  # what this judge used had no answer: the next run judges with the sheet as it is then
            raise AnswersWaiting([(waiting, self.path)])


def read_sheet(path: Path, must_exist: bool = False) -> dict[str, dict]:
    """A sheet judge's rows by key ({} for a sheet not yet written, unless it must exist)."""
    if not path.is_file():
        if must_exist:
            raise CfbenchError(f"{path}: no such sheet; --answers-from takes runs audited with the same sheet: judge")
        return {}
    rows = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row["output"], str | None) or not isinstance(row["key"], str):
                raise TypeError
        except (json.JSONDecodeError, KeyError, TypeError):
            raise CfbenchError(
                f"{path}:{lineno}: not a sheet row; each line is {{key, prompt, max_tokens, output}}, output a string or null"
            ) from None
        rows[row["key"]] = row
    return rows


def documents(row: dict) -> list[str]:
    """What the judge reads for an audited question: its source, then the proposer's retrieved passages in order."""
    return [row["source"], *(e["contents"] for e in row["evidence"])]


def _rule(reference: str, candidate: str) -> Verdict | None:
    if not normalize(candidate):
        return Verdict(False, "empty")
    return Verdict(True, "match") if matches(candidate, reference) else None


class GoldJudge:
    """The `reference` judge: gold answers attached to the run's corpus rows.

    A row's `answers` (or `golden_answers`) answer whatever is asked about it. A row with `qa` (the
    training-source corpus: every gold question asked about the passage) answers a proposed question
    only through the gold question most like it: normalised word-set Jaccard >= QA_MATCH, else the
    pair stays unresolved, since a passage's other answers say nothing about this question."""

    QA_MATCH = 0.5

    def __init__(self, corpus: Path) -> None:
        self.corpus = corpus
        self.golds: dict[str, list[str]] = {}
        self.qa: dict[str, list[tuple[set[str], list[str]]]] = {}
        for _, row in jsonl.iter_rows(corpus, jsonl.read_bytes(corpus)):
            answers = row.get("answers", row.get("golden_answers"))
            if answers:
                self.golds[str(row["id"])] = [answers] if isinstance(answers, str) else [str(a) for a in answers]
            elif row.get("qa"):
                self.qa[str(row["id"])] = [(set(normalize(q["question"]).split()), [str(a) for a in q["answers"]]) for q in row["qa"]]
        self.needed = self.sent = 0

    def describe(self) -> dict:
        return {
            "judge": "reference",
            "identity": "reference",
            "corpus": portable(self.corpus),
            "sources_with_gold": len(self.golds) + len(self.qa),
            "qa_match": self.QA_MATCH,
            "correct_if": "normalised exact match with any gold answer (of the matching gold question, for qa sources)",
        }

    def references(self, rows: list[dict]) -> list[Reference]:
        return [self._reference(r) for r in rows]

    def waiting(self) -> int:
        """Gold answers never wait."""
        return 0

    def require_answers(self) -> None:
        """Gold answers never wait."""

    def golds_for(self, row: dict) -> list[str] | None:
        if row["source_id"] in self.golds:
            return self.golds[row["source_id"]]
        asked = set(normalize(row["question"]).split())
        overlap = [
            (len(asked & words) / len(asked | words), answers) for words, answers in self.qa.get(row["source_id"], ()) if asked | words
        ]
        best = max(overlap, key=lambda pair: pair[0], default=(0.0, None))
        return best[1] if best[0] >= self.QA_MATCH else None

    def _reference(self, row: dict) -> Reference:
        golds = self.golds_for(row)
        if not golds:
            reason = "no gold question on the source is like this one" if row["source_id"] in self.qa else "the source has no gold answer"
            return Reference("unresolved", None, None, reason)
        sentences = [(k, x) for k, doc in enumerate(documents(row)) for x in _SENTENCE.split(doc.partition("\n")[2])]
        for gold in golds:
            found = next(((k, x) for k, x in sentences if score(x, [gold])["cover_em"]), None)  # whole words: "1" is not in "1990"
            if found:
                return Reference("resolved", gold, found[1], None, found[0])
        return Reference("unresolved", None, None, "no gold answer occurs in a sentence of the evidence")

    def verdicts(self, items: list[tuple[dict, Reference, str]]) -> list[Verdict]:
        return [_rule(ref.answer, c) or Verdict(any(matches(c, g) for g in self.golds_for(row)), "gold") for row, ref, c in items]


def judge_for(
    spec: str,
    corpus: Path,
    cache: Path,
    *,
    api_key: str | None = None,
    reasoning_effort: str | None = None,
    max_output_tokens: int | None = None,
):
    """The judge `--judge SPEC` names; LLM judges answer through `cache`."""
    kind, _, rest = spec.partition(":")
    if kind != "openai" and (api_key or reasoning_effort or max_output_tokens):
        raise CfbenchError(f"--api-key, --reasoning-effort and --max-output-tokens are for openai: judges, not --judge {spec!r}")
    if spec == "reference":
        return GoldJudge(corpus)
    if kind == "openai":
        model, at, url = rest.rpartition("@") if "@" in rest else (rest, "", None)
        if not model or (at and not url.startswith(("http://", "https://"))):
            raise CfbenchError(
                f"--judge {spec!r}: write openai:MODEL@URL (e.g. openai:qwen@http://127.0.0.1:8001/v1) "
                "or openai:MODEL for the hosted OpenAI API"
            )
        identity = f"openai:{model}" + "".join(
            f"|{k}={v}" for k, v in [("reasoning_effort", reasoning_effort), ("max_output_tokens", max_output_tokens)] if v
        )
        chat = _OpenAIChat(model, url, api_key=api_key, reasoning_effort=reasoning_effort, max_output_tokens=max_output_tokens)
        return LLMJudge("openai", identity, chat, JudgeCache(cache))
    if kind == "hf" and rest:
        from cfbench.harness.checkpoints import resolve

        weights = resolve(rest).weights_sha256
        return LLMJudge("hf", f"hf:{weights or rest}", _LocalChat(rest), JudgeCache(cache))
    if kind == "sheet" and re.fullmatch(r"[A-Za-z0-9_.-]+", rest):
        return SheetJudge(spec, cache.parent / SHEET_FILE)
    raise CfbenchError(
        f"unknown --judge {spec!r}; use openai:MODEL@URL, openai:MODEL (hosted), hf:MODEL_OR_DIR, sheet:NAME (letters, digits, ._-) "
        "or reference"
    )


def judged_dir(run: Path, spec: str, reasoning_effort: str | None = None) -> Path:
    """Where `cfbench audit` keeps a run's judgements by this judge (and a sheet judge's sheet): RUN/judged/<slug>."""
    return run / "judged" / slug(spec, reasoning_effort)


def slug(spec: str, reasoning_effort: str | None = None) -> str:
    """A directory name for a judge spec: the judge kind and model (and reasoning effort), URL left out."""
    kind, _, rest = spec.partition(":")
    name = rest.rpartition("@")[0] or rest if kind == "openai" else rest
    name = f"{name}-{reasoning_effort}" if reasoning_effort else name
    return re.sub(r"-{2,}|[^A-Za-z0-9_.-]+", "-", f"{kind}-{name.strip('/')}" if name else kind).strip("-")
