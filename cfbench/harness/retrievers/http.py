"""A client for any server speaking Search-R1's retrieval API (`POST /retrieve`).

The request body is byte for byte what Search-R1's own client sends (`requests.post(url,
json={"queries", "topk", "return_scores": True})`). Batched, with timeouts and retries with
backoff; a server that is down or answers nonsense is an error. As Search-R1's own client does, an
empty hit list (its BM25 server's answer for a query Lucene matches nothing for) is an empty
observation, not an error, and a document without an id (its BM25 server over an index of raw
documents) gets a stable one derived from its contents, marked as such: `derived-sha256:HEX`.
A hit whose contents is not text or whose score is not a finite number (NaN, which Python's JSON
reader accepts but no JSON file may hold) is refused, naming the query and the hit.

The URL may carry credentials (`http://user:pass@host/`); they are sent, never recorded: describe()
and every message show the URL without them.
"""

from __future__ import annotations

import hashlib
import json
import math

import httpx

from cfbench.harness.errors import CfbenchError
from cfbench.harness.http_retry import post_with_retries
from cfbench.harness.retrievers import Hit
from cfbench.harness.urls import without_credentials

MAX_QUERY_CHARS = 8192
DERIVED_ID = "derived-sha256:"


class HTTPRetriever:
    def __init__(self, url: str, *, timeout: float = 30.0, retries: int = 3, backoff: float = 0.5, batch_size: int = 64) -> None:
        self.base = url.rstrip("/").removesuffix("/retrieve")
        self.url = self.base + "/retrieve"
        self.shown = without_credentials(self.url)  # what records and messages name
        self.timeout, self.retries, self.backoff, self.batch_size = timeout, retries, backoff, batch_size
        self._client = httpx.Client(timeout=timeout)
        self.health = self._health()

    def _health(self) -> dict:
        """The server's /health (cfbench servers report their index there); {} if it has none. Only the server's
        claim: it is recorded as such, and the result cache keys it with the server's URL (cache.py)."""
        try:
            answer = self._client.get(self.base + "/health")
        except httpx.HTTPError as err:
            raise CfbenchError(
                f"retrieval server {without_credentials(self.base)} is not answering ({type(err).__name__}); "
                "start it with `cfbench retriever serve` or fix --retriever"
            ) from None
        try:
            return answer.json() if answer.status_code == 200 else {}
        except ValueError:  # a /health that is not JSON tells us nothing
            return {}

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k <= 0:
            raise CfbenchError(f"top-k must be positive, got {k}")
        out: list[list[Hit]] = []
        for start in range(0, len(queries), self.batch_size):
            out += self._post(queries[start : start + self.batch_size], k)
        return out

    def _post(self, queries: list[str], k: int) -> list[list[Hit]]:
        body = json.dumps({"queries": queries, "topk": k, "return_scores": True}).encode()
        answer = post_with_retries(self._client, self.url, body, retries=self.retries, backoff=self.backoff, what="retrieval server")
        return self._parse(answer, len(queries), k)

    def _parse(self, answer: httpx.Response, n: int, k: int) -> list[list[Hit]]:
        try:
            result = answer.json()["result"]
            if len(result) != n:
                raise ValueError(f"{len(result)} result lists for {n} queries")
            return [[self._hit(q, i, item) for i, item in enumerate(items[:k], start=1)] for q, items in enumerate(result)]
        except (ValueError, KeyError, TypeError) as err:
            raise CfbenchError(f"retrieval server {self.shown} answered in an unexpected form ({err})") from None

    def _hit(self, query: int, rank: int, item: dict) -> Hit:
        doc = item["document"]
        contents = doc["contents"] if "contents" in doc else f'"{doc["title"]}"\n{doc["text"]}'
        score = item["score"]
        where = f"retrieval server {self.shown}: query {query} hit {rank}"
        if not isinstance(contents, str):
            raise CfbenchError(f"{where} has contents {contents!r}, not text; the server's corpus is damaged, fix or rebuild its index")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise CfbenchError(f"{where} has score {score!r}, not a finite number; fix the server's index or scoring")
        pid = str(doc["id"]) if "id" in doc else DERIVED_ID + hashlib.sha256(contents.encode()).hexdigest()
        return Hit(pid, contents, float(score))

    def describe(self) -> dict:
        return {
            "kind": "http",
            "url": self.shown,
            "server": self.health.get("retriever"),
            "index_sha256": (self.health.get("retriever") or {}).get("index_sha256"),
        }
