"""What the warm-start builders share: a passage's title, the metric's containment test, a trajectory row."""

from __future__ import annotations

from cfbench.harness.metrics import normalize

# The proposer's 2-hop turns (propose-2, compose-2): name the entity it searches, then ask and answer.
PROPOSER_SEARCH = "<think> The document mentions {entity}. Let me search for it. </think>\n<search> {entity} </search>"
PROPOSER_TWO_HOP = (
    "<think> Now I can ask a question that needs both documents. </think>\n<question> {question} </question>\n<answer> {answer} </answer>"
)


def passage_title(contents: str) -> str:
    """A corpus passage is `"Title"\\ntext`."""
    return contents.split("\n", 1)[0].strip().strip('"')


def contains(text: str, phrase: str) -> bool:
    """`phrase` occurs in `text` as whole words after the metric's normalisation (Cover-EM's test)."""
    return f" {normalize(phrase)} " in f" {normalize(text)} "


def trajectory_row(qid: str, role: str, kind: str, source: str, prompt_text: str, turns: list[tuple[str, str]], answer: str) -> dict:
    """A protocol-v1 trajectory for supervised fine-tuning: each turn's generated text and the observation after it."""
    return {
        "id": f"{kind}:{qid}",
        "role": role,
        "kind": kind,
        "source": source,
        "prompt": prompt_text,
        "turns": [{"generated": g, "observation": o} for g, o in turns],
        "answer": answer,
    }
