"""Replay the retrieval of a finished run: every recorded query gets exactly its recorded passages.

`--retriever replay:RUN_DIR` answers from RUN_DIR/trajectories.jsonl (ids and scores) and the
corpus (contents), so a rerun, or another model's run, sees byte-identical observations without
the original index or server. A query the record never made is an error, not a guess.
"""

from __future__ import annotations

import json
from pathlib import Path

from cfbench.harness.corpus import Corpus
from cfbench.harness.errors import CfbenchError
from cfbench.harness.retrievers import Hit


class ReplayRetriever:
    def __init__(self, run_dir: Path, corpus: Corpus) -> None:
        path = run_dir / "trajectories.jsonl"
        if not path.is_file():
            raise CfbenchError(f"{run_dir} has no trajectories.jsonl to replay")
        self.run_dir = run_dir
        self.corpus = corpus
        self._contents = dict(zip(corpus.ids, corpus.contents))
        self._recorded: dict[tuple[str, int], list[tuple[str, float]]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            for turn in json.loads(line)["turns"]:
                if turn["action"] == "search":
                    hits = list(zip(turn["doc_ids"], turn["doc_scores"]))
                    self._recorded[(turn["query"], len(hits))] = hits
        self.source = json.loads((run_dir / "run.json").read_text())["retriever"] if (run_dir / "run.json").is_file() else {}

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        results = []
        for query in queries:
            hits = self._recorded.get((query, k))
            if hits is None:
                raise CfbenchError(f"query {query[:80]!r} (k={k}) was never made in {self.run_dir}; replay covers recorded queries only")
            missing = [pid for pid, _ in hits if pid not in self._contents]
            if missing:
                raise CfbenchError(f"passage {missing[0]!r} of the record is not in {self.corpus.path}; replay with the run's corpus")
            results.append([Hit(pid, self._contents[pid], score) for pid, score in hits])
        return results

    def describe(self) -> dict:
        return {
            "kind": "replay",
            "run": str(self.run_dir),
            "corpus_sha256": self.corpus.sha256,
            "index_sha256": self.source.get("index_sha256"),
            "replayed": self.source,
        }
