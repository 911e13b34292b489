"""The `openai` SDK client behind cfbench's OpenAI-style calls (the openai engine, the audit's judge), its errors as one line.

The SDK does authentication (--api-key or OPENAI_API_KEY, OPENAI_ORG_ID), retries with exponential backoff on connection
errors, 408/409/429 and 5xx (honouring Retry-After), and per-request timeouts; cfbench only turns what is left into a
CfbenchError that names the server (without credentials) and what to do. A 200 answer whose body is not JSON (a
server cut off mid-answer) is one such error too: the SDK hands its JSONDecodeError on as it is.
"""

from __future__ import annotations

import contextlib
import json
import os

import openai

from cfbench.harness.errors import CfbenchError
from cfbench.harness.urls import without_credentials

HOSTED = "https://api.openai.com/v1"
LOCAL_KEY = "EMPTY"  # vLLM and `cfbench serve-model` started without a key accept any; the SDK insists on one


def make_client(
    base_url: str | None, *, api_key: str | None = None, organization: str | None = None, timeout: float = 600.0, retries: int = 3
) -> openai.OpenAI:
    """A client for `base_url` (None: the hosted OpenAI API, which needs a key)."""
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if not key and base_url is None:
        raise CfbenchError("the hosted OpenAI API needs a key: set OPENAI_API_KEY or pass --api-key")
    return openai.OpenAI(
        api_key=key or LOCAL_KEY, organization=organization, base_url=base_url or HOSTED, timeout=timeout, max_retries=retries
    )


@contextlib.contextmanager
def one_line_errors(what: str, client: openai.OpenAI):
    """SDK errors (raised once its retries are spent) as one CfbenchError naming `what` and the server."""
    url = without_credentials(str(client.base_url).rstrip("/"))
    tries = client.max_retries + 1
    try:
        yield
    except openai.APIConnectionError as err:  # refused, reset or timed out, every try
        raise CfbenchError(
            f"{what} {url} is not answering ({type(err).__name__} after {tries} tries); start it "
            "(`cfbench serve-model`, `vllm serve`) or fix the URL"
        ) from None
    except openai.APIStatusError as err:
        code = err.status_code
        if code in (408, 409, 429) or code >= 500:
            raise CfbenchError(f"{what} {url} failed {tries} times (last: HTTP {code}); is it overloaded or down?") from None
        detail = err.body.get("message", err.body) if isinstance(err.body, dict) else (err.body or err.response.text)
        hint = "; check --api-key / OPENAI_API_KEY" if code in (401, 403) else ""
        raise CfbenchError(f"{what} {url} refused the request: HTTP {code} {str(detail)[:300]}{hint}") from None
    except json.JSONDecodeError as err:  # the SDK parses a 200 answer's body and does not catch this
        raise CfbenchError(
            f"{what} {url} answered with a body that is not JSON ({err.msg} at character {err.pos}); "
            "it may have been cut off: check the server's log, then retry"
        ) from None
    except openai.OpenAIError as err:
        raise CfbenchError(f"{what} {url}: {err}") from None
