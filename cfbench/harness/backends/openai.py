"""Protocol-v1 generation through an OpenAI-compatible `/v1/completions` endpoint (vLLM, `cfbench serve-model`).

The client builds prompts and cuts contexts with the model's own tokenizer (harness.backends.tokens)
and sends token ids, so the server decodes exactly the tokens an in-process engine would. Requests
carry `request_size` prompts each, at most `concurrency` in flight; greedy (temperature 0), stop
strings kept in the text (vLLM's `include_stop_str_in_output`, sent with the other vLLM fields through the
SDK's `extra_body`; a server that strips them but reports `stop_reason` gets them put back). Requests go
through the `openai` SDK (harness.openai_client): its key, retries and timeouts.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from cfbench.harness.backends.tokens import PromptTokens, TokenizedEngine
from cfbench.harness.errors import CfbenchError
from cfbench.harness.openai_client import make_client, one_line_errors
from cfbench.harness.protocol import cut_at_stop


class OpenAIBackend(TokenizedEngine):
    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: str | None = None,
        *,
        concurrency: int = 4,
        request_size: int = 16,
        timeout: float = 600.0,
        retries: int = 3,
        api_key: str | None = None,
        organization: str | None = None,
    ) -> None:
        if concurrency < 1 or request_size < 1:
            raise CfbenchError(f"--concurrency and --request-size must be at least 1, got {concurrency} and {request_size}")
        root = base_url.rstrip("/").removesuffix("/completions").removesuffix("/v1")
        self.url = root + "/v1"
        self.model = model
        self.tokenizer_name = tokenizer or model
        self.concurrency, self.request_size = concurrency, request_size
        self.timeout, self.retries = timeout, retries
        self._client = make_client(self.url, api_key=api_key, organization=organization, timeout=timeout, retries=retries)
        self.card = self._model_card()
        self.tokens = PromptTokens.load(self.tokenizer_name)

    def _model_card(self) -> dict:
        """The server's /v1/models entry for our model; an error names the models it does serve."""
        with one_line_errors("model server", self._client):
            try:
                served = [card.to_dict() for card in self._client.models.list().data]
            except (AttributeError, TypeError, ValueError):
                raise CfbenchError(f"{self.url}/models answered without a model list; is --base-url an OpenAI-compatible server?") from None
        for card in served:
            if card.get("id") == self.model:
                return card
        names = ", ".join(str(c.get("id")) for c in served) or "none"
        raise CfbenchError(f"model server {self.url} does not serve --model {self.model!r} (it serves: {names})")

    def generate(self, prompts: list[str], max_new_tokens: int, max_context_tokens: int, stop: tuple[str, ...]) -> list[str]:
        encoded = [self.tokens.context(p, max_context_tokens) for p in prompts]
        chunks = [encoded[i : i + self.request_size] for i in range(0, len(encoded), self.request_size)]
        with ThreadPoolExecutor(self.concurrency) as pool:
            answers = list(pool.map(lambda chunk: self._complete(chunk, max_new_tokens, stop), chunks))
        return [text for texts in answers for text in texts]

    def _complete(self, chunk: list[list[int]], max_new_tokens: int, stop: tuple[str, ...]) -> list[str]:
        with one_line_errors("model server", self._client):
            answer = self._client.completions.create(
                model=self.model,
                prompt=chunk,
                max_tokens=max_new_tokens,
                temperature=0.0,
                n=1,
                **({"stop": list(stop)} if stop else {}),
                extra_body={"include_stop_str_in_output": True, "skip_special_tokens": True},
            )  # vLLM's fields
        try:
            choices = sorted(answer.choices, key=lambda c: c.index)
            if [c.index for c in choices] != list(range(len(chunk))):
                raise ValueError(f"choice indexes {[c.index for c in choices]} for {len(chunk)} prompts")
            return [_with_stop(c.text, getattr(c, "stop_reason", None), stop) for c in choices]
        except (ValueError, AttributeError, TypeError) as err:
            raise CfbenchError(f"model server {self.url}/completions answered in an unexpected form ({err})") from None

    def describe(self) -> dict:
        cfbench_card = self.card.get("cfbench") or {}
        return {
            "engine": "openai",
            "base_url": self.url,
            "model": self.model,
            "tokenizer": self.tokenizer_name,
            "chat_template": self.tokens.has_template,
            "prompt_format": "token ids",
            "request_size": self.request_size,
            "concurrency": self.concurrency,
            "timeout_s": self.timeout,
            "retries": self.retries,
            "weights_sha256": cfbench_card.get("weights_sha256"),
            "server": self.card,
        }


def _with_stop(text: str, stop_reason, stop: tuple[str, ...]) -> str:
    if isinstance(stop_reason, str) and stop_reason in stop and not text.endswith(stop_reason):
        text += stop_reason
    return cut_at_stop(text, stop)
