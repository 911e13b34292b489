"""A scripted OpenAI-style HTTP server on loopback, for what a real model server cannot show: the headers a client sends,
and overload answers (503/429) on demand. It speaks real HTTP, so the `openai` SDK is exercised end to end."""

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def openai_stub(answer):
    """Yield (base URL ending in /v1, list of received requests); `answer(path, body) -> (status, json body)` answers each POST
    (a body given as bytes is sent as it is: a server that cuts its answer short).

    GET /v1/models lists one model, `stub-model`. Each received request is {"path", "headers" (lower-cased names), "body"}.
    """
    received = []

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, payload: dict | bytes) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("retry-after-ms", "1")  # the SDK honours it: retries come at once, not after its 0.5 s+ backoff
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            received.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": None})
            self._reply(200, {"object": "list", "data": [{"id": "stub-model", "object": "model", "owned_by": "stub"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
            self._reply(*answer(self.path, body))

        def log_message(self, *args):  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", received
    finally:
        server.shutdown()
        server.server_close()
