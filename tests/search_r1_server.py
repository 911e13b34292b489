"""A loopback server answering `POST /retrieve` the way Search-R1's own retrieval server does.

Search-R1's search/retrieval_server.py (FastAPI) answers {"result": [...]}, one list per query: for
return_scores, {"document": doc, "score": s} items. Its BM25 retriever returns `[]` for a query
Lucene finds nothing for, and, over an index that stores raw documents, documents built from the
stored contents without an id: {"title": first line with quotes stripped, "text": the rest,
"contents"}. It has no /health (404); `health` here lets a test play a server that claims one.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def raw_document(contents: str) -> dict:
    """Search-R1's BM25 document for an index with stored raw documents (`contain_doc`): no id."""
    lines = contents.split("\n")
    return {"title": lines[0].strip('"'), "text": "\n".join(lines[1:]), "contents": contents}


@contextlib.contextmanager
def search_r1_server(search: Callable[[str, int], list[tuple[dict, float]]], health: dict | None = None) -> Iterator[str]:
    """Serve `search(query, topk) -> [(document, score), ...]` on a free loopback port; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._send(200, health) if health is not None and self.path == "/health" else self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            results = [search(q, request.get("topk") or 3) for q in request["queries"]]
            if request.get("return_scores"):
                self._send(200, {"result": [[{"document": d, "score": s} for d, s in hits] for hits in results]})
            else:
                self._send(200, {"result": [[d for d, _ in hits] for hits in results]})

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # keep test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
