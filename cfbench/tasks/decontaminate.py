"""Training questions against an evaluation suite: duplicates, near-duplicates and answer leaks; and answerability.

A training question is contaminated by an evaluation question when their questions are equal, equal
after the metric's normalisation (`normalize`, docs/protocol.md §3.1), or near-duplicates: the
sets of their words (lowercased, ASCII punctuation deleted) have Jaccard similarity >=
NEAR_DUPLICATE. The words keep the articles the answer metric drops: in a question they are words
like any other, and dropping them hides pairs such as "who got the most followers on instagram in
the world" / "who has the most followers in the world on instagram". Training on such a question
would teach the test item.

Because the bundled corpus is also the evaluation corpus (as wiki-18 is for Search-R1), a training
question can leak an evaluation answer without resembling its question: when it retrieves the
evidence passage of an evaluation question and has the same gold answer, training rewards reading
that answer off that passage. `answer_leaks` finds those.

`answerable` is the filter of the answerable training set: a question whose gold answer (any alias)
is covered, under Cover-EM (docs/protocol.md §3.2), by the text of its BM25 top-k passages; the
others cannot be solved by searching the question and give GRPO no signal.

Why hand-written pairs: exact all-pairs Jaccard over a few thousand short questions is one sparse
matrix product (scipy); approximate libraries (MinHash) could miss a pair, and a missed pair is a leak.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from cfbench.harness.metrics import normalize, score

_PUNCT = str.maketrans("", "", string.punctuation)

NEAR_DUPLICATE = 0.8  # token-set Jaccard of normalised questions at or above which two questions are one


@dataclass(frozen=True)
class Pair:
    train: int  # index into the training questions
    held_out: int  # index into the evaluation questions
    kind: str  # "exact", "normalised" or "near" (token-set Jaccard >= NEAR_DUPLICATE)
    jaccard: float


def words(question: str) -> frozenset[str]:
    """The question's word set for near-duplicate matching: lowercased, ASCII punctuation deleted, articles kept."""
    return frozenset(question.lower().translate(_PUNCT).split())


def _token_matrix(token_sets: Sequence[frozenset[str]], vocab: dict[str, int]) -> sparse.csr_matrix:
    rows = [i for i, tokens in enumerate(token_sets) for _ in tokens]
    cols = [vocab[t] for tokens in token_sets for t in tokens]
    return sparse.csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, cols)), shape=(len(token_sets), len(vocab)))


def contaminated_pairs(train: Sequence[str], held_out: Sequence[str], threshold: float = NEAR_DUPLICATE) -> list[Pair]:
    """Every (training, evaluation) question pair that is an exact, normalised or near duplicate, in training order."""
    norm_train, norm_held = [normalize(q) for q in train], [normalize(q) for q in held_out]
    sets_train, sets_held = [words(q) for q in train], [words(q) for q in held_out]
    vocab = {t: k for k, t in enumerate(sorted(set().union(*sets_train, *sets_held)))}
    a, b = _token_matrix(sets_train, vocab), _token_matrix(sets_held, vocab)
    shared = (a @ b.T).tocoo()
    size_a, size_b = np.array([len(s) for s in sets_train]), np.array([len(s) for s in sets_held])
    union = size_a[shared.row] + size_b[shared.col] - shared.data
    jaccard = shared.data / np.maximum(union, 1)
    found = {(int(i), int(j)): float(s) for i, j, s in zip(shared.row, shared.col, jaccard) if s >= threshold}
    # Questions that normalise to the same text (including to nothing, which shares no token) are duplicates whatever their tokens.
    by_text: dict[str, list[int]] = {}
    for j, q in enumerate(norm_held):
        by_text.setdefault(q, []).append(j)
    for i, q in enumerate(norm_train):
        for j in by_text.get(q, []):
            found[(i, j)] = 1.0
    pairs = []
    for (i, j), s in sorted(found.items()):
        kind = "exact" if train[i].strip() == held_out[j].strip() else "normalised" if norm_train[i] == norm_held[j] else "near"
        pairs.append(Pair(i, j, kind, round(s, 4)))
    return pairs


def answer_leaks(
    train_answers: Sequence[Iterable[str]], retrieved: Sequence[Iterable[str]], held_out: Sequence[tuple[Iterable[str], Iterable[str]]]
) -> list[int]:
    """Indices of training questions that retrieve an evaluation question's evidence passage and share its gold answer.

    `retrieved[i]`: the passage ids training question i retrieves; `held_out`: (gold answers, evidence ids) per
    evaluation question. Answers compare after normalisation (an alias that normalises to nothing never matches).
    """
    answers_by_passage: dict[str, set[str]] = {}
    for answers, evidence in held_out:
        gold = {normalize(a) for a in answers} - {""}
        for pid in evidence:
            answers_by_passage.setdefault(pid, set()).update(gold)
    leaks = []
    for i, (answers, passages) in enumerate(zip(train_answers, retrieved, strict=True)):
        gold = {normalize(a) for a in answers} - {""}
        if any(gold & answers_by_passage.get(pid, set()) for pid in passages):
            leaks.append(i)
    return leaks


def answerable(answers: Sequence[str], passages: Sequence[str]) -> bool:
    """Whether some gold alias is covered (Cover-EM) by the retrieved passages' text, read together."""
    return score(" ".join(passages), list(answers))["cover_em"] == 1.0
