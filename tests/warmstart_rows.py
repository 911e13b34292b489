"""A handful of warm-start trajectories in the shipped file's format, with real BM25 observations over the bundled corpus.

The trainer's tests use them instead of tasks/train/warmstart.jsonl.gz so that they exercise the
recipe on a few examples whose every token they can reason about.
"""

import gzip
import json

from cfbench.harness.corpus import split_contents
from cfbench.harness.protocol import observation, user_prompt
from cfbench.training.selfevolve.proposer import prompt as proposer_prompt
from cfbench.training.selfevolve.sources import Task

QUESTIONS = (
    ("single", "who wrote the novel moby dick", "Herman Melville"),
    ("single", "what is the capital city of australia", "Canberra"),
    ("single", "in which year did the first world war end", "1918"),
)


def solver_turns(bm25, queries: list[str], answer: str) -> list[dict]:
    turns = [
        {"generated": f"<think> I need to look this up. </think>\n<search> {q} </search>", "observation": observation(hits)}
        for q, hits in zip(queries, bm25.search(queries, 3))
    ]
    return [*turns, {"generated": f"<think> Doc 1 gives the answer. </think>\n<answer> {answer} </answer>", "observation": ""}]


def rows(bm25, corpus) -> list[dict]:
    out = [
        {"id": f"{kind}:{i}", "role": "solver", "kind": kind, "prompt": user_prompt(q), "turns": solver_turns(bm25, [q], a)}
        for i, (kind, q, a) in enumerate(QUESTIONS)
    ]
    out.append(
        {
            "id": "reformulate:0",
            "role": "solver",
            "kind": "reformulate",
            "prompt": user_prompt("who painted the mona lisa"),
            "turns": solver_turns(bm25, ["mona lisa painter", "Mona Lisa Leonardo da Vinci portrait"], "Leonardo da Vinci"),
        }
    )
    title, _ = split_contents(corpus.contents[0])
    task = Task(id="0:0", source_id=corpus.ids[0], contents=corpus.contents[0], hops=1)
    out.append(
        {
            "id": "propose-1:0",
            "role": "proposer",
            "kind": "propose-1",
            "prompt": proposer_prompt(task),
            "turns": [
                {
                    "generated": f"<question> Which article is this passage from? </question> <answer> {title.strip(chr(34))} </answer>",
                    "observation": "",
                }
            ],
        }
    )
    return out


def write(path, rows_: list[dict]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows_)
