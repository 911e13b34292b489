"""2-hop proposals composed from two SQuAD questions: the proposer warm start's `compose-2` trajectories.

HotpotQA's 400 bridge questions give only ~50 grounded `propose-2` trajectories (build_warmstart.py), too
few to teach a 135M proposer the 2-hop format: after the warm start, 2-hop proposals parsed 5% of the time
(1-hop: 57%). These are built the way MuSiQue composes single-hop questions, from SQuAD alone:

- the source is a SQuAD paragraph P1 with a question q1 whose answer a1 is the title of another article B
  of the training corpus ("What disease did antibiotics help eliminate?" -> "tuberculosis");
- the proposer searches B's title (the real retriever, the real observation as the agent loop cuts it);
- among the passages it finds, a paragraph of B with a question q2 that names B ("What bacterium causes
  tuberculosis infection?"), whose answer a2 is visible in the observation;
- the proposal is q2 with B replaced by what q1 asks for, and its label a2: a span of the found passage.

Either form of the composition needs both hops: "What bacterium causes the disease antibiotics helped
eliminate infection?"-style rewrites come from q1's own words when it reads "What/Who/Which is/was ...?"
(its noun phrase replaces B); otherwise B becomes X and q1 defines X ("X is the answer to: q1 ...").

Why hand-written: the trajectories must be byte-identical to what the proposer's own rollouts record
(its prompt, search turn, observation format and cut), which no dataset library produces.
"""

from __future__ import annotations

import re

from cfbench.harness.metrics import normalize
from cfbench.tasks.trajectory_rows import PROPOSER_SEARCH, PROPOSER_TWO_HOP, contains, passage_title, trajectory_row

MAX_ANSWER_WORDS = 6
_COPULAR = re.compile(r"(?:what|who|which) (?:is|was|are|were) (.+?)\s*\?*", re.IGNORECASE)


def compose(q1: str, a1: str, q2: str, entity: str) -> str | None:
    """q2 with `entity` (which q1 answers with a1) replaced by what q1 asks for; None when q2 does not name it literally."""
    named = re.compile(rf"(?<!\w){re.escape(entity)}(?!\w)", re.IGNORECASE)
    if not named.search(q2):
        return None
    copular = _COPULAR.fullmatch(q1.strip())
    if copular and not contains(copular.group(1), a1):
        return named.sub(lambda _: copular.group(1), q2)
    return f"X is the answer to: {q1.strip()} {named.sub('X', q2)}"


def candidates(corpus: list[dict]) -> list[tuple[dict, dict, str]]:
    """(source paragraph, q1, B's title) for every SQuAD question answered by another article's title."""
    articles: dict[str, str] = {}
    for row in corpus:
        if row["id"].startswith("squad-"):
            articles.setdefault(normalize(passage_title(row["contents"])), passage_title(row["contents"]))
    out = []
    for row in corpus:
        if not row["id"].startswith("squad-"):
            continue
        own = normalize(passage_title(row["contents"]))
        for q in row["qa"]:
            target = normalize(q["answers"][0])
            if target in articles and target != own and contains(row["contents"], q["answers"][0]):
                out.append((row, q, articles[target]))
    return out


def trajectories(synth, corpus: list[dict]) -> list[dict]:
    """One compose-2 trajectory per usable q1, each q2 used at most once (so labels do not repeat)."""
    found = candidates(corpus)
    searched = synth.search([entity for _, _, entity in found])
    used: set[str] = set()
    out = []
    for (source, q1, entity), (hits, obs) in zip(found, searched):
        pairs = ((q2, compose(q1["question"], q1["answers"][0], q2["question"], entity)) for q2 in _found_questions(synth, hits, entity))
        for q2, question in pairs:
            row = _trajectory(source, q1, q2, question, entity, obs) if q2["id"] not in used and question else None
            if row is not None:
                used.add(q2["id"])
                out.append(row)
                break
    return out


def _found_questions(synth, hits, entity: str) -> list[dict]:
    """The questions asked about the hits that are paragraphs of the searched article."""
    return [q for hit in hits if passage_title(hit.contents) == entity and hit.id in synth.by_id for q in synth.by_id[hit.id]["qa"]]


def _trajectory(source: dict, q1: dict, q2: dict, question: str, entity: str, obs: str) -> dict | None:
    """The proposer's search and proposal, or None when the label is long or not in the observation, or the proposal
    names the searched entity or does not parse strictly as a 2-hop proposal."""
    from cfbench.training.selfevolve.proposer import parse, prompt
    from cfbench.training.selfevolve.sources import Task

    answer = q2["answers"][0]
    if len(answer.split()) > MAX_ANSWER_WORDS or not contains(obs, answer) or contains(question, entity):
        return None
    turns = [(PROPOSER_SEARCH.format(entity=entity), obs), (PROPOSER_TWO_HOP.format(question=question, answer=answer), "")]
    if parse([{"generated": turns[0][0], "action": "search"}, {"generated": turns[1][0], "action": "answer"}], 2).error:
        return None  # the parse also refuses an answer that appears in the question
    task = Task(f"{q1['id']}+{q2['id']}", source["id"], source["contents"], 2)
    return trajectory_row(task.id, "proposer", "compose-2", "squad", prompt(task), turns, answer)
