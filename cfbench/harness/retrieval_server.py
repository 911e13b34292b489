"""`cfbench retriever serve`: Search-R1's retrieval API over any cfbench index.

    POST /retrieve  {"queries": [...], "topk": 3, "return_scores": true}
                    -> {"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}
                    (with return_scores false the inner items are the documents themselves)
    GET  /health    -> {"status": "ok", "retriever": {kind, params, corpus and index hashes}, "limits": {...}}

Bad requests get 422 with a reason and the server keeps serving. The request schema is strict (no
coercion of "3" or true to a topk, no unknown fields), and an empty (or all-blank) query is refused:
it has nothing to rank by, so any passages it got would be arbitrary. What one request may cost is bounded: its
body (413, refused from Content-Length or while it streams in, never read whole first), queries x
topk (422), and its time (503 past the deadline); searches take turns in chunks, so a small request
is not held behind a big one.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from cfbench.harness.retrievers import Retriever
from cfbench.harness.retrievers.http import MAX_QUERY_CHARS
from cfbench.harness.round_robin import RoundRobinSearcher

MAX_TOPK = 1000


@dataclass(frozen=True)
class Limits:
    # 8,192 covers one request from Search-R1's trainer (512 prompts x 5 samples x top-3 = 7,680 passages)
    max_results: int = 8192  # queries x topk
    max_body_bytes: int = 1 << 20
    deadline_s: float = 60.0


class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    queries: list[str] = Field(min_length=1)
    topk: int | None = None
    return_scores: bool = False


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def make_app(retriever: Retriever, default_topk: int = 3, limits: Limits = Limits()) -> FastAPI:
    app = FastAPI(title="cfbench retrieval server")
    searcher = RoundRobinSearcher(retriever)

    @app.exception_handler(_Refused)
    async def refused(_: Request, err: _Refused):
        return JSONResponse({"detail": err.detail}, status_code=err.status)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "retriever": retriever.describe(), "limits": asdict(limits)}

    @app.post("/retrieve")
    async def retrieve(raw: Request):
        request = _parse(await _body(raw, limits.max_body_bytes))
        k = default_topk if request.topk is None else request.topk
        if not 1 <= k <= MAX_TOPK:
            raise _Refused(422, f"topk must be between 1 and {MAX_TOPK}, got {k}")
        n = len(request.queries)
        if n * k > limits.max_results:
            raise _Refused(
                422,
                f"{n} queries x topk {k} = {n * k} passages; the limit is {limits.max_results} per request "
                "(--max-results): send fewer queries per request",
            )
        for i, query in enumerate(request.queries):
            if not query.strip():
                raise _Refused(422, f"query {i} is empty; send text to search for (nothing to rank passages by)")
            if len(query) > MAX_QUERY_CHARS:
                raise _Refused(422, f"query {i} has {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
        try:
            results = await asyncio.wait_for(asyncio.wrap_future(searcher.submit(request.queries, k)), limits.deadline_s)
        except TimeoutError:  # wait_for cancelled the search: its remaining chunks are dropped
            raise _Refused(
                503,
                f"the search did not finish within the {limits.deadline_s:g} s deadline (--deadline); "
                "retry later or send fewer queries per request",
            ) from None
        if request.return_scores:
            payload = [[{"document": {"id": h.id, "contents": h.contents}, "score": h.score} for h in hits] for hits in results]
        else:
            payload = [[{"id": h.id, "contents": h.contents} for h in hits] for hits in results]
        # serialised off the event loop: megabytes of JSON would otherwise stall every other connection
        body = await run_in_threadpool(json.dumps, {"result": payload}, ensure_ascii=False, separators=(",", ":"))
        return Response(body.encode(), media_type="application/json")

    return app


async def _body(raw: Request, limit: int) -> bytes:
    """The body, refused as soon as it is known to be over the limit (a 200 MB upload is never held whole)."""
    declared = raw.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _Refused(413, f"the body has {int(declared)} bytes; the limit is {limit} (--max-body-bytes)")
    body = bytearray()
    async for chunk in raw.stream():
        body += chunk
        if len(body) > limit:
            raise _Refused(413, f"the body has more than {limit} bytes, the limit (--max-body-bytes)")
    return bytes(body)


def _parse(body: bytes) -> RetrieveRequest:
    try:
        return RetrieveRequest.model_validate_json(body)
    except ValidationError as err:
        reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in err.errors())
        raise _Refused(422, f"bad request: {reasons}") from None


def serve(retriever: Retriever, host: str, port: int, limits: Limits = Limits(), max_connections: int = 64) -> None:
    import uvicorn

    # limit_concurrency: past this many open connections uvicorn answers 503 instead of holding more bodies in memory
    uvicorn.run(make_app(retriever, limits=limits), host=host, port=port, log_level="warning", limit_concurrency=max_connections)
