"""Build the training-source corpus and the warm-start trajectories from TRAINING data only.

    python -m cfbench.tasks.build_warmstart --sources ../shared/data/train_sources

Outputs (hash-pinned in manifest.json under "corpus.train-sources", "train.warmstart" and "train.warmstart-proposer"):
- corpus/train-sources.jsonl.gz: SQuAD v1.1 train paragraphs and HotpotQA train (ECM 500) evidence
  sentences as `{"id", "contents", "qa"}` passages (`contents` is `"Title"\\ntext`, `qa` the gold
  questions asked about the passage), minus everything that touches the evaluation: a paragraph whose
  article title is the title of an evaluation evidence passage, or whose word 8-grams overlap any
  bundled (evaluation) passage by more than 20%, and every question asked by an evaluation suite.
  It is both the retrieval corpus of the warm start and the self-evolution source corpus
  (docs/protocol.md §5).
- train/warmstart.jsonl.gz: protocol-v1 trajectories `{"id", "role", "kind", "source", "prompt",
  "turns": [{"generated", "observation"}], "answer"}` for supervised fine-tuning. The observations
  are exactly what the evaluation loop appends (`protocol.observation` of the top-3 BM25 hits over the
  corpus above, cut to `max_obs_tokens` by the bundled tokenizer, truncated ones included), so the
  model learns to read real retrieval output. A solver trajectory is kept only when a retrieved
  passage really contains the answer (grounded). Kinds:
  - `single`: search the question, answer from the hits;
  - `reformulate`: the question alone misses, the question with its article's title finds it;
  - `two-hop`: HotpotQA bridge questions: the first search finds the bridge passage, the second
    searches the bridge entity and finds the answer;
  - `propose-1` / `propose-2`: the self-evolution proposer's prompt on a source passage, then (for
    2 hops) one search, then `<question>` + `<answer>` from a real (passage, question, answer) triple.
- train/warmstart-proposer.jsonl.gz: the data of the proposer warm start (`cfbench train --treatment
  warm-start-proposer`): the proposer rows above and `compose-2`, 2-hop proposals composed from two
  SQuAD questions whose label is a span of the passage the search found (compose_two_hop.py).

Why hand-written: the trajectories must be byte-identical to what cfbench's own agent loop would
record (its prompt, observation format and truncation), which no dataset library produces.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import random
import re
from collections import Counter
from pathlib import Path

from cfbench.harness.metrics import normalize
from cfbench.harness.protocol import Knobs, observation, user_prompt
from cfbench.tasks import compose_two_hop
from cfbench.tasks.trajectory_rows import PROPOSER_SEARCH, PROPOSER_TWO_HOP, contains, passage_title, trajectory_row

HERE = Path(__file__).resolve().parent
SEED = 1325
SHINGLE = 8
MAX_OVERLAP = 0.2
# How many trajectories of each kind to keep (all candidates are shuffled with SEED first).
QUOTA = {"single": 1200, "reformulate": 400, "two-hop": 300, "propose-1": 400, "propose-2": 150}
MAX_ANSWER_WORDS = 6
OWNED_TRAIN = ("warmstart", "warmstart-proposer")  # the manifest's training-set entries this builder writes


def _gzip_jsonl(rows: list[dict]) -> tuple[bytes, str]:
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows).encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(text)
    return buf.getvalue(), hashlib.sha256(text).hexdigest()


def _shingles(text: str) -> set[bytes]:
    words = normalize(text).split()
    grams = (" ".join(words[i : i + SHINGLE]).encode() for i in range(max(0, len(words) - SHINGLE + 1)))
    return {hashlib.blake2b(g, digest_size=8).digest() for g in grams}


def evaluation_side() -> tuple[set[str], set[str], set[bytes]]:
    """(normalised eval questions, normalised eval evidence titles, eval passage shingles)."""
    suites = HERE / "suites"
    questions, evidence = set(), set()
    for name in ("fixed1325.jsonl", "mini.jsonl", "full.jsonl.gz"):
        raw = (suites / name).read_bytes()
        raw = gzip.decompress(raw) if name.endswith(".gz") else raw
        for line in raw.decode("utf-8").splitlines():
            row = json.loads(line)
            questions.add(normalize(row["question"]))
            evidence.update(row.get("evidence_ids") or ())
    titles, shingles = set(), set()
    for line in gzip.open(HERE / "corpus" / "bundled.jsonl.gz", "rt", encoding="utf-8"):
        row = json.loads(line)
        if row["id"] in evidence:
            titles.add(normalize(passage_title(row["contents"])))
        shingles |= _shingles(row["contents"].split("\n", 1)[-1])
    return questions, titles, shingles


def _ecm_title(sentence: str) -> str:
    """HotpotQA supporting sentences come without their article title; their subject is its title."""
    head = re.split(r" \(| is | was | are | were | has | had |, ", sentence, maxsplit=1)[0]
    words = head.split()
    return " ".join(words[:8]) if 0 < len(words) <= 8 else " ".join(sentence.split()[:4])


def build_corpus(sources: Path, eval_questions: set[str], eval_titles: set[str], eval_shingles: set[bytes]) -> tuple[list[dict], Counter]:
    dropped: Counter = Counter()
    rows: list[dict] = []
    squad = json.loads(gzip.decompress((sources / "squad" / "squad_v1.1_train_from_explorer.json.gz").read_bytes()))
    for a, article in enumerate(squad["data"]):
        title = article["title"].replace("_", " ")
        for p, para in enumerate(article["paragraphs"]):
            if normalize(title) in eval_titles:
                dropped["squad paragraphs: evaluation evidence title"] += 1
                continue
            sh = _shingles(para["context"])
            if sh and len(sh & eval_shingles) / len(sh) > MAX_OVERLAP:
                dropped["squad paragraphs: overlap an evaluation passage"] += 1
                continue
            qa = []
            for q in para["qas"]:
                if normalize(q["question"]) in eval_questions:
                    dropped["squad questions: asked by an evaluation suite"] += 1
                    continue
                qa.append({"id": q["id"], "question": q["question"].strip(), "answers": [q["answers"][0]["text"].strip()]})
            rows.append({"id": f"squad-{a:03d}-{p:03d}", "contents": f'"{title}"\n{para["context"].strip()}', "qa": qa})
    seen: dict[str, dict] = {}
    for i, line in enumerate((sources / "hotpotqa" / "ecm_hotpotqa_train_500_evidence.jsonl").read_text(encoding="utf-8").splitlines()):
        row = json.loads(line)
        if normalize(row["question"]) in eval_questions:
            dropped["hotpotqa questions: asked by an evaluation suite"] += 1
            continue
        sentences = [s.strip() for s in row["evidence"]]
        if any(len(_shingles(s) & eval_shingles) > 0 for s in sentences):
            dropped["hotpotqa questions: evidence overlaps an evaluation passage"] += 1
            continue
        if any(normalize(_ecm_title(s)) in eval_titles for s in sentences):
            dropped["hotpotqa questions: evidence title is an evaluation evidence title"] += 1
            continue
        for k, sentence in enumerate(sentences):
            if sentence in seen:
                continue
            seen[sentence] = {"id": f"hotpotqa-ecm-{i:03d}-{k}", "contents": f'"{_ecm_title(sentence)}"\n{sentence}', "qa": []}
            rows.append(seen[sentence])
        seen[sentences[-1]]["qa"].append(
            {
                "id": f"hotpotqa-ecm-{i:03d}",
                "question": row["question"].strip(),
                "answers": [row["answer"].strip()],
                "type": row["type"],
                "evidence_ids": [seen[s]["id"] for s in sentences],
            }
        )
    return rows, dropped


def contamination(corpus: list[dict], trajectories: list[dict]) -> list[str]:
    """Every way the training data touches the evaluation: an evaluation evidence title, a passage
    overlapping an evaluation passage, an evaluation question asked. Empty when clean."""
    eval_questions, eval_titles, eval_shingles = evaluation_side()
    found = []
    for row in corpus:
        if normalize(passage_title(row["contents"])) in eval_titles:
            found.append(f"{row['id']}: title {passage_title(row['contents'])!r} is an evaluation evidence title")
        sh = _shingles(row["contents"].split("\n", 1)[-1])
        if sh and len(sh & eval_shingles) / len(sh) > MAX_OVERLAP:
            found.append(f"{row['id']}: overlaps an evaluation passage")
        found += [
            f"{row['id']}: asks evaluation question {q['question']!r}"
            for q in row.get("qa", ())
            if normalize(q["question"]) in eval_questions
        ]
    for row in trajectories:
        for text in [row["prompt"], *(t["generated"] for t in row["turns"])]:
            asked = re.findall(r"Question: (.*)\n", text) + re.findall(r"<question>(.*?)</question>", text, re.DOTALL)
            found += [f"{row['id']}: asks evaluation question {q.strip()!r}" for q in asked if normalize(q) in eval_questions]
    return found


def _query(question: str) -> str:
    return question.strip().rstrip("?").strip()


class Synth:
    """Trajectories through the real retriever and the real observation format."""

    def __init__(self, corpus: list[dict], retriever, tokens, knobs: Knobs) -> None:
        self.retriever, self.tokens, self.knobs = retriever, tokens, knobs
        self.by_id = {r["id"]: r for r in corpus}

    def search(self, queries: list[str]) -> list[tuple[list, str]]:
        results = self.retriever.search(queries, self.knobs.topk)
        return [(hits, self.tokens.truncate(observation(hits), self.knobs.max_obs_tokens)) for hits in results]


def _answer_turn(hits, answer: str) -> str | None:
    for i, hit in enumerate(hits, start=1):
        if contains(hit.contents, answer):
            return f"<think> Doc {i} ({passage_title(hit.contents)}) gives the answer. </think>\n<answer> {answer} </answer>"
    return None


def _visible(obs: str, answer: str) -> bool:
    """The answer survives the observation cut (a truncated block may lose the passage holding it)."""
    return contains(obs, answer)


def solver_trajectories(synth: Synth, qa: list[tuple[str, dict]]) -> list[dict]:
    """single and reformulate from SQuAD questions: (article title, qa)."""
    first = synth.search([_query(q["question"]) for _, q in qa])
    out, retry = [], []
    for (title, q), (hits, obs) in zip(qa, first):
        answer = q["answers"][0]
        turn = _answer_turn(hits, answer) if _visible(obs, answer) else None
        search = f"<think> I need to look this up. </think>\n<search> {_query(q['question'])} </search>"
        if turn:
            out.append(
                trajectory_row(q["id"], "solver", "single", "squad", user_prompt(q["question"]), [(search, obs), (turn, "")], answer)
            )
        elif not any(contains(h.contents, answer) for h in hits):
            retry.append((title, q, search, obs))
    second = synth.search([f"{title} {_query(q['question'])}" for title, q, _, _ in retry])
    for (title, q, search, obs), (hits2, obs2) in zip(retry, second):
        answer = q["answers"][0]
        turn = _answer_turn(hits2, answer) if _visible(obs2, answer) else None
        if turn:
            again = (
                f"<think> These documents do not answer it. The question is about {title}; let me search again with that. "
                f"</think>\n<search> {title} {_query(q['question'])} </search>"
            )
            out.append(
                trajectory_row(
                    q["id"],
                    "solver",
                    "reformulate",
                    "squad",
                    user_prompt(q["question"]),
                    [(search, obs), (again, obs2), (turn, "")],
                    answer,
                )
            )
    return out


def two_hop_trajectories(synth: Synth, bridge: list[dict]) -> list[dict]:
    """HotpotQA bridge questions whose first search finds the bridge sentence but not the answer."""
    first = synth.search([_query(q["question"]) for q in bridge])
    keep = []
    for q, (hits, obs) in zip(bridge, first):
        answer = q["answers"][0]
        holding = [e for e in q["evidence_ids"] if contains(synth.by_id[e]["contents"], answer)]
        if not holding:
            continue
        entity = passage_title(synth.by_id[holding[-1]]["contents"])
        if contains(obs, answer) or not contains(obs, entity) or contains(q["question"], entity):
            continue
        keep.append((q, hits, obs, entity))
    second = synth.search([f"{entity} {_query(q['question'])}" for q, _, _, entity in keep])
    out = []
    for (q, _, obs, entity), (hits2, obs2) in zip(keep, second):
        answer = q["answers"][0]
        turn = _answer_turn(hits2, answer) if _visible(obs2, answer) else None
        if turn:
            turns = [
                (f"<think> I need to look this up. </think>\n<search> {_query(q['question'])} </search>", obs),
                (
                    f"<think> The documents point to {entity}. I need more about {entity}. </think>\n"
                    f"<search> {entity} {_query(q['question'])} </search>",
                    obs2,
                ),
                (turn, ""),
            ]
            out.append(trajectory_row(q["id"], "solver", "two-hop", "hotpotqa-ecm", user_prompt(q["question"]), turns, answer))
    return out


def proposer_trajectories(synth: Synth, one_hop: list[tuple[dict, dict]], bridge: list[dict]) -> list[dict]:
    from cfbench.training.selfevolve.proposer import parse, prompt
    from cfbench.training.selfevolve.sources import Task

    out = []
    for passage, q in one_hop:
        answer = q["answers"][0]
        gen = (
            f"<think> The document states the answer to this. </think>\n<question> {q['question']} </question>\n<answer> {answer} </answer>"
        )
        turns = [(gen, "")]
        if not parse([{"generated": gen, "action": "answer"}], 1).error:
            out.append(
                trajectory_row(
                    q["id"], "proposer", "propose-1", "squad", prompt(Task(q["id"], passage["id"], passage["contents"], 1)), turns, answer
                )
            )
    sources = [(q, synth.by_id[q["evidence_ids"][0]], synth.by_id[q["evidence_ids"][-1]]) for q in bridge]
    found = synth.search([passage_title(target["contents"]) for _, _, target in sources])
    for (q, source, target), (hits, obs) in zip(sources, found):
        answer = q["answers"][0]
        entity = passage_title(target["contents"])
        if source is target or not contains(source["contents"], entity) or not _visible(obs, answer):
            continue
        if target["id"] not in {h.id for h in hits}:
            continue
        search = PROPOSER_SEARCH.format(entity=entity)
        gen = PROPOSER_TWO_HOP.format(question=q["question"], answer=answer)
        turns = [{"generated": search, "action": "search"}, {"generated": gen, "action": "answer"}]
        if not parse(turns, 2).error:
            out.append(
                trajectory_row(
                    q["id"],
                    "proposer",
                    "propose-2",
                    "hotpotqa-ecm",
                    prompt(Task(q["id"], source["id"], source["contents"], 2)),
                    [(search, obs), (gen, "")],
                    answer,
                )
            )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=Path, required=True, help="shared/data/train_sources")
    parser.add_argument("--out", type=Path, default=HERE, help="where corpus/ and train/ are written [default: cfbench/tasks]")
    args = parser.parse_args(argv)

    from cfbench.harness.backends.tokens import PromptTokens
    from cfbench.harness.retrievers.choose import retriever_for

    eval_questions, eval_titles, eval_shingles = evaluation_side()
    corpus, dropped = build_corpus(args.sources, eval_questions, eval_titles, eval_shingles)
    corpus_bytes, corpus_sha = _gzip_jsonl(corpus)
    corpus_path = args.out / "corpus" / "train-sources.jsonl.gz"
    corpus_path.parent.mkdir(parents=True, exist_ok=True)
    corpus_path.write_bytes(corpus_bytes)

    synth = Synth(corpus, retriever_for("bm25", corpus_path), PromptTokens.load("smollm2-135m"), Knobs())
    rng = random.Random(SEED)
    squad_qa = [(passage_title(p["contents"]), q, p) for p in corpus if p["id"].startswith("squad-") for q in p["qa"]]
    rng.shuffle(squad_qa)
    short = [(t, q, p) for t, q, p in squad_qa if len(q["answers"][0].split()) <= MAX_ANSWER_WORDS]
    solver_pool = short[: 4 * (QUOTA["single"] + QUOTA["reformulate"])]
    solver = solver_trajectories(synth, [(t, q) for t, q, _ in solver_pool])
    bridge = [q for p in corpus if p["id"].startswith("hotpotqa-") for q in p["qa"] if q["type"] == "bridge"]
    proposer_pool = [(p, q) for _, q, p in short[len(solver_pool) : len(solver_pool) + 2 * QUOTA["propose-1"]]]
    rows = solver + two_hop_trajectories(synth, bridge) + proposer_trajectories(synth, proposer_pool, bridge)
    by_kind: dict[str, list[dict]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row)
    kept = [r for kind in QUOTA for r in by_kind.get(kind, [])[: QUOTA[kind]]]
    rng.shuffle(kept)
    data, data_sha = _gzip_jsonl(kept)
    data_path = args.out / "train" / "warmstart.jsonl.gz"
    data_path.parent.mkdir(parents=True, exist_ok=True)
    data_path.write_bytes(data)
    # the proposer warm start's data: the proposer rows above and the 2-hop compositions (compose_two_hop.py)
    proposer = [r for r in kept if r["role"] == "proposer"] + compose_two_hop.trajectories(synth, corpus)
    random.Random(SEED).shuffle(proposer)
    proposer_data, proposer_sha = _gzip_jsonl(proposer)
    (args.out / "train" / "warmstart-proposer.jsonl.gz").write_bytes(proposer_data)

    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    manifest.setdefault("corpus", {})["train-sources"] = {
        "file": "corpus/train-sources.jsonl.gz",
        "sha256": corpus_sha,
        "n": len(corpus),
        "questions": sum(len(r["qa"]) for r in corpus),
        "dropped": dict(sorted(dropped.items())),
    }
    manifest.setdefault("train", {})["warmstart"] = {
        "file": "train/warmstart.jsonl.gz",
        "sha256": data_sha,
        "n": len(kept),
        "per_kind": {k: sum(r["kind"] == k for r in kept) for k in QUOTA},
        "candidates_per_kind": {k: len(by_kind.get(k, [])) for k in QUOTA},
        "seed": SEED,
    }
    manifest["train"]["warmstart-proposer"] = {
        "file": "train/warmstart-proposer.jsonl.gz",
        "sha256": proposer_sha,
        "n": len(proposer),
        "per_kind": dict(sorted(Counter(r["kind"] for r in proposer).items())),
        "seed": SEED,
    }
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")  # build_data.py writes it the same way
    print(json.dumps({"corpus": manifest["corpus"]["train-sources"]} | {k: manifest["train"][k] for k in OWNED_TRAIN}, indent=2))


if __name__ == "__main__":
    main()
