"""POST JSON to a server with timeouts and retries, so a flaky server is retried and a broken one is loud.

Connection errors, timeouts, 429 and 5xx are retried with exponential backoff; any other non-200
answer is a request the server will never accept, so it is an error at once. Messages name the URL without
its credentials.
"""

from __future__ import annotations

import time

import httpx

from cfbench.harness.errors import CfbenchError
from cfbench.harness.urls import without_credentials


def post_with_retries(client: httpx.Client, url: str, body: bytes, *, retries: int, backoff: float, what: str) -> httpx.Response:
    shown = without_credentials(url)
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        try:
            answer = client.post(url, content=body, headers={"Content-Type": "application/json"})
        except httpx.HTTPError as err:
            last = type(err).__name__
            continue
        if answer.status_code == 429 or answer.status_code >= 500:
            last = f"HTTP {answer.status_code}"
            continue
        if answer.status_code != 200:
            raise CfbenchError(f"{what} {shown} refused the request: HTTP {answer.status_code} {answer.text[:300]}")
        return answer
    raise CfbenchError(f"{what} {shown} failed {retries + 1} times (last: {last}); is it running?")
