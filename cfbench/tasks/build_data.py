"""Build cfbench's shipped suites, bundled corpus and training set from shared/data/sources.

    python -m cfbench.tasks.build_data --sources ../shared/data/sources --train-sources ../shared/data/train_sources

Deterministic: the same sources and seed give byte-identical files (gzip headers carry no time).
The rules are written down in tasks/README.md; keep the two in step.
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import hashlib
import io
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from cfbench.harness.metrics import BENCHMARKS, normalize
from cfbench.harness.protocol import normalize_question
from cfbench.tasks.decontaminate import answer_leaks, answerable, contaminated_pairs

SEED = 1325
PER_BENCHMARK = 200
MINI_PER_BENCHMARK = 10
HERE = Path(__file__).resolve().parent


def qkey(question: str) -> str:
    return normalize(question)


def as_list(answer) -> list[str]:
    if isinstance(answer, str):
        if answer.startswith("[") and answer.endswith("]"):
            return [str(a) for a in ast.literal_eval(answer)]
        return [answer]
    return [str(a) for a in answer]


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------- corpus


class Corpus:
    """Passages in first-seen order, deduplicated on (title, whitespace-collapsed text)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self._ids: dict[tuple[str, str], str] = {}
        self.by_title: dict[str, list[str]] = {}

    def add(self, title: str, text: str, origin: str) -> str:
        title, text = title.strip(), " ".join(text.split())
        key = (title, text)
        if key not in self._ids:
            pid = str(len(self.rows))
            self._ids[key] = pid
            self.rows.append({"id": pid, "contents": f'"{title}"\n{text}', "origin": origin})
            self.by_title.setdefault(title, []).append(pid)
        return self._ids[key]


# ---------------------------------------------------------------- suite rows


@dataclass(eq=False)
class Row:
    benchmark: str
    question: str
    answers: list[str]
    sources: list[dict]
    evidence_ids: list[str] = field(default_factory=list)
    has_aliases: bool = False
    names: list[tuple[int, str]] = field(default_factory=list)

    @property
    def id(self) -> str:
        """The best id any source gave: a dataset-native id, then a FlashRAG id, then a row number."""
        return f"{self.benchmark}/{min(self.names)[1]}"

    def merge(self, answers: list[str], source: dict, aliases: bool, name: tuple[int, str] | None) -> None:
        self.answers += [a for a in answers if a not in self.answers]
        self.sources.append(source)
        self.has_aliases |= aliases
        if name:
            self.names.append(name)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "benchmark": self.benchmark,
            "question": self.question,
            "golden_answers": self.answers,
            "source": self.sources,
            "evidence_ids": self.evidence_ids,
        }


NATIVE, FLASHRAG, ROW = 0, 1, 2


class Catalog:
    """Every candidate question of one benchmark, in first-seen order, found by normalised question."""

    def __init__(self, benchmark: str) -> None:
        self.benchmark = benchmark
        self.rows: list[Row] = []
        self.by_q: dict[str, list[Row]] = {}

    def add(self, question: str, answers: list[str], source: dict, aliases: bool, name: tuple[int, str]) -> Row:
        row = Row(self.benchmark, question.strip(), [], [])
        row.merge(answers, source, aliases, name)
        self.rows.append(row)
        self.by_q.setdefault(qkey(question), []).append(row)
        return row

    def find(self, question: str) -> Row | None:
        """The row of this question, or None when unknown or ambiguous (two rows share the text)."""
        rows = self.by_q.get(qkey(question), [])
        return rows[0] if len(rows) == 1 else None

    def attach(self, question: str, answers: list[str], source: dict, aliases: bool, name: tuple[int, str] | None = None) -> Row | None:
        """Merge another source's copy of a known question (same split) into its row."""
        row = self.find(question)
        if row is not None:
            row.merge(answers, source, aliases, name)
        return row


def build(src: Path) -> tuple[dict[str, Catalog], Corpus, dict[str, list[Row]]]:
    corpus = Corpus()
    cat = {b: Catalog(b) for b in BENCHMARKS}
    pools: dict[str, list[Row]] = {b: [] for b in BENCHMARKS}

    def load_full(bench: str, name: str, split: str) -> None:
        # Row numbers of these files are NOT FlashRAG ids (checked: NQ's order differs), hence "-row-".
        for i, r in enumerate(json.loads((src / "full_splits" / name).read_text())):
            answers = as_list(r["answer"])
            source = {"file": f"full_splits/{name}", "row": i}
            cat[bench].add(r["question"], answers, source, len(answers) > 1, (ROW, f"{split}-row-{i}"))

    load_full("nq", "nq_test_3610.json", "test")
    load_full("hotpotqa", "hotpotqa_dev_7405.json", "dev")
    load_full("musique", "musique_dev_2417.json", "dev")
    load_full("2wikimultihopqa", "2wikimultihopqa_dev_12576.json", "dev")
    load_full("bamboogle", "bamboogle_test_125.json", "test")
    pools["bamboogle"] = list(cat["bamboogle"].rows)

    # FlashRAG test subsamples with alias lists (NQ's are rows of the full test set; others are new).
    for bench in ("nq", "triviaqa", "popqa"):
        name = f"{bench}/flashrag_{bench}_test_subsample1000.jsonl"
        for r in read_jsonl(src / name):
            args = (as_list(r["golden_answers"]), {"file": name, "id": r["id"]}, True, (FLASHRAG, r["id"]))
            row = cat[bench].attach(r["question"], *args) if bench == "nq" else None
            pools[bench].append(row or cat[bench].add(r["question"], *args))

    # NQ: one gold passage per nq-open-oracle question.
    name = "nq/nq-open-oracle.jsonl.gz"
    for r in read_jsonl(src / name):
        ctx = r["ctxs"][0]
        pid = corpus.add(ctx["title"], ctx["text"], name)
        row = cat["nq"].find(r["question"])
        if row is not None and pid not in row.evidence_ids:
            row.evidence_ids.append(pid)

    # HotpotQA: IRCoT dev subsample, 10 paragraphs each, supporting ones are the evidence.
    name = "hotpotqa/ircot_hotpotqa_dev_subsampled_500.jsonl"
    for r in read_jsonl(src / name):
        spans = r["answers_objects"][0]["spans"]
        row = cat["hotpotqa"].attach(r["question_text"], spans, {"file": name, "id": r["question_id"]}, False, (NATIVE, r["question_id"]))
        for ctx in r["contexts"]:
            pid = corpus.add(ctx["title"], ctx["paragraph_text"], name)
            if row is not None and ctx["is_supporting"]:
                row.evidence_ids.append(pid)
        if row is not None:
            pools["hotpotqa"].append(row)
    name = "hotpotqa/hipporag_hotpotqa_train100_corpus.json"
    for title, sentences in json.loads((src / name).read_text()).items():
        corpus.add(title, "".join(sentences), name)

    # 2WikiMultihopQA: HippoRAG's 1000 dev questions and the corpus built for them.
    name = "2wikimultihopqa/2wikimultihopqa_corpus.json"
    for p in json.loads((src / name).read_text()):
        corpus.add(p["title"], p["text"], name)
    name = "2wikimultihopqa/2wikimultihop_questions_1000.json"
    for r in json.loads((src / name).read_text()):
        row = cat["2wikimultihopqa"].attach(r["question"], [r["answer"]], {"file": name, "id": r["id"]}, False, (NATIVE, r["id"]))
        if row is None:
            continue
        pools["2wikimultihopqa"].append(row)
        subjects = list(dict.fromkeys(t[0] for t in r["evidence"]))
        if all(s in corpus.by_title for s in subjects):
            row.evidence_ids = [pid for s in subjects for pid in corpus.by_title[s]]

    # MuSiQue: KAG's 100 dev questions with aliases and their 20 paragraphs.
    name = "musique/kag_musique_qa_100_dev_with_paragraphs.json"
    for r in json.loads((src / name).read_text()):
        answers = [r["answer"], *r["answer_aliases"]]
        row = cat["musique"].attach(r["question"], answers, {"file": name, "id": r["id"]}, True, (NATIVE, r["id"]))
        for p in r["paragraphs"]:
            pid = corpus.add(p["title"], p["paragraph_text"], name)
            if row is not None and p["is_supporting"]:
                row.evidence_ids.append(pid)
    name = "musique/hipporag_musique_train100_corpus.json"
    for p in json.loads((src / name).read_text()):
        corpus.add(p["title"], p["text"], name)
    pools["musique"] = list(cat["musique"].rows)

    # Bamboogle: passages another system retrieved (derived; not gold evidence).
    name = "bamboogle/bamboogle_r1searcher_retrieved_passages.jsonl"
    for p in read_jsonl(src / name):
        corpus.add(p["title"], p["text"], name)

    # PopQA long tail: CRAG's per-question knowledge lines, titled by the subject's Wikipedia page.
    csv_name, ref_name = "popqa/LongTailQA_DisambPopQA_1399.csv", "popqa/crag_popqa_longtail_ref_correct.txt"
    with open(src / csv_name, newline="", encoding="utf-8") as f:
        meta = list(csv.DictReader(f))
    questions = (src / "popqa/crag_popqa_longtail_sources.txt").read_text(encoding="utf-8").splitlines()
    lines = (src / ref_name).read_text(encoding="utf-8").splitlines()
    for m, q, line in zip(meta, questions, lines, strict=True):
        pid = corpus.add(m["s_wiki_title"], line.lstrip("#"), ref_name)
        row = cat["popqa"].find(q)
        if row is not None and {normalize(a) for a in json.loads(m["possible_answers"])} & {normalize(a) for a in row.answers}:
            row.evidence_ids.append(pid)

    # DeepResearcher's test sets: more aliases (and native ids) for questions already known.
    name = "multi/deepresearcher_test_3197.parquet"
    ds_bench = {
        "nq": "nq",
        "tq": "triviaqa",
        "popqa": "popqa",
        "hotpotqa": "hotpotqa",
        "2wiki": "2wikimultihopqa",
        "musique": "musique",
        "Bamboogle": "bamboogle",
    }
    native = {"hotpotqa", "2wiki", "musique"}
    for r in pd.read_parquet(src / name).itertuples():
        answers = r.reward_model["ground_truth"].split("<|answer_split|>")
        index = r.extra_info["index"]
        name_ = (NATIVE, index.split("_", 1)[1]) if r.data_source in native else None
        cat[ds_bench[r.data_source]].attach(r.prompt[0]["content"], answers, {"file": name, "id": index}, len(answers) > 1, name_)

    return cat, corpus, pools


def choose(cat: Catalog, pool: list[Row], n: int, rng: random.Random) -> list[Row]:
    """Seeded sample of n from the pool: rows with evidence in the corpus first, then rows with aliases."""
    tiers: list[list[Row]] = [[], [], []]
    for row in dict.fromkeys(pool):
        tiers[0 if row.evidence_ids else 1 if row.has_aliases else 2].append(row)
    chosen: list[Row] = []
    for tier in tiers:
        chosen += rng.sample(tier, min(n - len(chosen), len(tier)))
    position = {row: i for i, row in enumerate(cat.rows)}
    return sorted(chosen, key=position.__getitem__)


# ---------------------------------------------------------------- training sets

TRAIN_SOURCES = ("nq", "hotpotqa")
DROP_REASONS = ("no_answer", "eval_overlap", "near_duplicate", "repeat")
ANSWERABLE_K = 3  # the protocol's topk (docs/protocol.md §2.3): what one search shows the model


def train_candidates(src: Path, train_src: Path | None = None) -> Iterator[tuple[str, dict, str, list[str]]]:
    """(source, provenance, question, answers) in file order: Search-R1's mix of NQ and HotpotQA training questions.

    hotpotqa_train_800.parquet says "train" but all 800 questions are HotpotQA dev questions (26 of
    them in fixed1325), so build_train drops every one; HippoRAG's 100 are real train questions, and
    with `train_src` (shared/data/train_sources) so are ECM's 500 HotpotQA train questions.
    """
    name = "nq/ambigqa_train_nq_open_questions.json"
    for i, r in enumerate(json.loads((src / name).read_text(encoding="utf-8"))):
        yield "nq", {"file": name, "row": i}, r["question"], r["answer"]
    name = "hotpotqa/hotpotqa_train_800.parquet"
    for i, r in enumerate(pd.read_parquet(src / name).itertuples()):
        target = json.loads(r.reward_model)["ground_truth"]["target"]  # what Search-R1's reward scores against
        yield "hotpotqa", {"file": name, "row": i}, r.question, [target] if isinstance(target, str) else list(target)
    name = "hotpotqa/hipporag_hotpotqa_train100.json"
    for r in json.loads((src / name).read_text(encoding="utf-8")):
        yield "hotpotqa", {"file": name, "id": r["_id"]}, r["question"], [r["answer"]]
    if train_src is not None:
        name = "hotpotqa/ecm_hotpotqa_train_500_evidence.jsonl"
        for i, r in enumerate(read_jsonl(train_src / name)):
            yield "hotpotqa", {"file": f"train_sources/{name}", "row": i}, r["question"], [r["answer"]]


def build_train(
    candidates: Iterable[tuple[str, dict, str, list[str]]], eval_questions: Iterable[str], fixed_questions: list[str]
) -> tuple[list[dict], dict[str, dict[str, int]]]:
    """Training rows, and per reason and source how many were dropped.

    A row is dropped when it has no non-blank answer, when its normalised question is one an eval
    suite asks (training on it would leak into the benchmark), when it is a near-duplicate of a
    fixed1325 question (tasks/decontaminate.py), or when an earlier row asks it.
    """
    candidates = list(candidates)
    held_out = {qkey(q) for q in eval_questions}
    near = {p.train for p in contaminated_pairs([c[2] for c in candidates], fixed_questions)}
    seen: set[str] = set()
    rows: list[dict] = []
    dropped = {reason: dict.fromkeys(TRAIN_SOURCES, 0) for reason in DROP_REASONS}
    for index, (source, provenance, question, answers) in enumerate(candidates):
        answers = list(dict.fromkeys(a.strip() for a in map(str, answers) if a.strip()))
        key = qkey(question)
        reason = (
            "no_answer"
            if not answers
            else "eval_overlap"
            if key in held_out
            else "near_duplicate"
            if index in near
            else "repeat"
            if key in seen
            else None
        )
        if reason:
            dropped[reason][source] += 1
            continue
        seen.add(key)
        ecm = "ecm_" in provenance["file"]  # its rows have no ids; "row-N" names rows of the other sources
        local = provenance["id"] if "id" in provenance else f"{'ecm-' if ecm else ''}row-{provenance['row']}"
        rows.append(
            {
                "id": f"{source}-train/{local}",
                "source": source,
                "question": normalize_question(question),
                "golden_answers": answers,
                "provenance": provenance,
            }
        )
    return rows, dropped


def _leaking(rows: list[dict], hits: list, fixed: list[dict]) -> set[int]:
    """Rows that retrieve the evidence passage of a fixed1325 question with the same gold answer (tasks/decontaminate.py:
    the bundled corpus is also the evaluation corpus)."""
    evidence = [(f["golden_answers"], f["evidence_ids"]) for f in fixed]
    return set(answer_leaks([r["golden_answers"] for r in rows], [[h.id for h in hs] for hs in hits], evidence))


def without_answer_leaks(rows: list[dict], retriever, fixed: list[dict], k: int = ANSWERABLE_K) -> tuple[list[dict], dict[str, int]]:
    """The rows that leak no fixed1325 answer through their BM25 top-k, and per source how many leaked."""
    leaks = _leaking(rows, retriever.search([r["question"] for r in rows], k), fixed)
    counts = dict.fromkeys(TRAIN_SOURCES, 0)
    for i in leaks:
        counts[rows[i]["source"]] += 1
    return [r for i, r in enumerate(rows) if i not in leaks], counts


def build_answerable(rows: list[dict], retriever, fixed: list[dict], k: int = ANSWERABLE_K) -> tuple[list[dict], dict]:
    """The rows whose gold answer the BM25 top-k of their question covers, minus answer leaks; and the counts."""
    hits = retriever.search([r["question"] for r in rows], k)
    leaks = _leaking(rows, hits, fixed)
    kept: list[dict] = []
    counts = {c: dict.fromkeys(TRAIN_SOURCES, 0) for c in ("candidates", "answerable", "answer_leak", "kept")}
    for i, (row, found) in enumerate(zip(rows, hits, strict=True)):
        counts["candidates"][row["source"]] += 1
        if not answerable(row["golden_answers"], [h.contents for h in found]):
            continue
        counts["answerable"][row["source"]] += 1
        if i in leaks:
            counts["answer_leak"][row["source"]] += 1
            continue
        counts["kept"][row["source"]] += 1
        kept.append(row)
    return kept, counts


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def write(path: Path, data: bytes) -> str:
    if path.suffix == ".gz":
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
            gz.write(data)
        path.write_bytes(buf.getvalue())
    else:
        path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, default=HERE.parent.parent / "shared" / "data" / "sources")
    parser.add_argument(
        "--train-sources",
        type=Path,
        default=None,
        help="shared/data/train_sources: also build train/search-r1-answerable.jsonl.gz",
    )
    parser.add_argument("--out", type=Path, default=HERE, help="where suites/, corpus/, train/ and manifest.json go")
    args = parser.parse_args()
    (args.out / "suites").mkdir(parents=True, exist_ok=True)
    (args.out / "corpus").mkdir(parents=True, exist_ok=True)
    (args.out / "train").mkdir(parents=True, exist_ok=True)
    cat, corpus, pools = build(args.sources)
    rng = random.Random(SEED)

    fixed: list[dict] = []
    mini: list[dict] = []
    for bench in BENCHMARKS:
        rows = [row.to_json() for row in choose(cat[bench], pools[bench], PER_BENCHMARK, rng)]
        fixed += rows
        picked = set(rng.sample(range(len(rows)), MINI_PER_BENCHMARK))
        mini += [r for i, r in enumerate(rows) if i in picked]
    full = [row.to_json() for bench in BENCHMARKS for row in cat[bench].rows]
    ids = [r["id"] for r in full]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"duplicate suite ids: {sorted({i for i in ids if ids.count(i) > 1})[:5]}")

    # Entries other builders own (build_warmstart's training sources and trajectories) are kept.
    path = args.out / "manifest.json"
    manifest = {"seed": SEED, "suites": {}, "corpus": {}, "train": {}} | (json.loads(path.read_text()) if path.is_file() else {})
    for name, rows, file in (("fixed1325", fixed, "fixed1325.jsonl"), ("mini", mini, "mini.jsonl"), ("full", full, "full.jsonl.gz")):
        sha = write(args.out / "suites" / file, jsonl_bytes(rows))
        counts = {b: sum(r["benchmark"] == b for r in rows) for b in BENCHMARKS}
        manifest["suites"][name] = {"file": f"suites/{file}", "sha256": sha, "n": len(rows), "per_benchmark": counts}
    sha = write(args.out / "corpus" / "bundled.jsonl.gz", jsonl_bytes(corpus.rows))
    manifest["corpus"]["bundled"] = {"file": "corpus/bundled.jsonl.gz", "sha256": sha, "n": len(corpus.rows)}
    from cfbench.harness.retrievers.choose import retriever_for

    retriever = retriever_for("bm25", args.out / "corpus" / "bundled.jsonl.gz")  # what a training rollout's search ranks
    eval_questions = [r["question"] for r in fixed + mini + full]
    fixed_questions = [r["question"] for r in fixed]
    train, dropped = build_train(train_candidates(args.sources), eval_questions, fixed_questions)
    train, leaks = without_answer_leaks(train, retriever, fixed)
    sha = write(args.out / "train" / "search-r1.jsonl.gz", jsonl_bytes(train))
    counts = {s: sum(r["source"] == s for r in train) for s in TRAIN_SOURCES}
    manifest["train"]["search-r1"] = {
        "file": "train/search-r1.jsonl.gz",
        "sha256": sha,
        "n": len(train),
        "per_source": counts,
        "dropped": dropped | {"answer_leak": leaks},
    }
    if args.train_sources is not None:
        rows, dropped = build_train(train_candidates(args.sources, args.train_sources), eval_questions, fixed_questions)
        kept, counts = build_answerable(rows, retriever, fixed)
        sha = write(args.out / "train" / "search-r1-answerable.jsonl.gz", jsonl_bytes(kept))
        manifest["train"]["search-r1-answerable"] = {
            "file": "train/search-r1-answerable.jsonl.gz",
            "sha256": sha,
            "n": len(kept),
            "per_source": counts["kept"],
            "filter": {
                "rule": "a gold alias is covered (cover_em) by the text of the question's BM25 top-k passages, read together",
                "retriever": "bm25",
                "corpus": "corpus/bundled.jsonl.gz",
                "k": ANSWERABLE_K,
            },
            "candidates": counts["candidates"],
            "answerable": counts["answerable"],
            "dropped": dropped | {"answer_leak": counts["answer_leak"]},
        }
    path.write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()
