"""`cfbench retriever serve`: Search-R1's retrieval API over any cfbench index.

    POST /retrieve  {"queries": [...], "topk": 3, "return_scores": true}
                    -> {"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}
                    (with return_scores false the inner items are the documents themselves)
    GET  /health    -> {"status": "ok", "retriever": {kind, params, corpus and index hashes}}

Bad requests get 422 with a reason and the server keeps serving.
"""

from __future__ import annotations

import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from cfbench.harness.retrievers import Retriever
from cfbench.harness.retrievers.http import MAX_QUERY_CHARS

MAX_QUERIES = 1024
MAX_TOPK = 1000


class RetrieveRequest(BaseModel):
    queries: list[str] = Field(min_length=1, max_length=MAX_QUERIES)
    topk: int | None = None
    return_scores: bool = False


def make_app(retriever: Retriever, default_topk: int = 3) -> FastAPI:
    app = FastAPI(title="cfbench retrieval server")
    lock = threading.Lock()  # retrievers are not assumed thread-safe

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "retriever": retriever.describe()}

    @app.post("/retrieve")
    async def retrieve(raw: Request):
        try:
            request = RetrieveRequest.model_validate_json(await raw.body())
        except ValidationError as err:
            reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in err.errors())
            return JSONResponse({"detail": f"bad request: {reasons}"}, status_code=422)
        k = default_topk if request.topk is None else request.topk
        if not 1 <= k <= MAX_TOPK:
            return JSONResponse({"detail": f"topk must be between 1 and {MAX_TOPK}, got {k}"}, status_code=422)
        for i, query in enumerate(request.queries):
            if len(query) > MAX_QUERY_CHARS:
                return JSONResponse({"detail": f"query {i} has {len(query)} characters; the limit is {MAX_QUERY_CHARS}"}, status_code=422)
        results = await run_in_threadpool(search, request.queries, k)
        if request.return_scores:
            return {"result": [[{"document": {"id": h.id, "contents": h.contents}, "score": h.score} for h in hits] for hits in results]}
        return {"result": [[{"id": h.id, "contents": h.contents} for h in hits] for hits in results]}

    def search(queries: list[str], k: int):
        with lock:
            return retriever.search(queries, k)

    return app


def serve(retriever: Retriever, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(make_app(retriever), host=host, port=port, log_level="warning")
