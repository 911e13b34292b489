"""Protocol-v1 generation through an OpenAI-compatible `/v1/completions` endpoint (vLLM, `cfbench serve-model`).

The client builds prompts and cuts contexts with the model's own tokenizer (harness.backends.tokens)
and sends token ids, so the server decodes exactly the tokens an in-process engine would. Requests
carry `request_size` prompts each, at most `concurrency` in flight; greedy (temperature 0), stop
strings kept in the text (vLLM's `include_stop_str_in_output`, sent with the other vLLM fields through the
SDK's `extra_body`; a server that strips them but reports `stop_reason` gets them put back). Requests go
through the `openai` SDK (harness.openai_client): its key, retries and timeouts. Credentials in --base-url
(`http://user:pass@host/v1`) are sent, never recorded: describe() keeps the URL without them.

For training rollouts the engine samples (temperature > 0): generate call k sends `seed`
call_seed(seed, k), and asks for the sampled ids (vLLM's `return_token_ids`) and their log-probs
(`logprobs: 0`). cfbench's engines report the log-probs of the distribution sampled from; run vLLM
with `--logprobs-mode processed_logprobs` to get the same (its default reports the raw model's).
With `request_size` at least the batch, a served hf model samples exactly what the in-process
engine does (tests/test_rollout_engines.py).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from cfbench.harness.backends import Completion, call_seed
from cfbench.harness.backends.tokens import PromptTokens, TokenizedEngine
from cfbench.harness.errors import CfbenchError
from cfbench.harness.openai_client import make_client, one_line_errors
from cfbench.harness.protocol import cut_at_stop
from cfbench.harness.urls import without_credentials


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
        temperature: float = 0.0,
        seed: int = 0,
    ) -> None:
        if concurrency < 1 or request_size < 1:
            raise CfbenchError(f"--concurrency and --request-size must be at least 1, got {concurrency} and {request_size}")
        self.temperature, self.seed, self.calls = temperature, seed, 0
        root = base_url.rstrip("/").removesuffix("/completions").removesuffix("/v1")
        self.url = root + "/v1"
        self.shown = without_credentials(self.url)  # what records and messages name
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
                raise CfbenchError(
                    f"{self.shown}/models answered without a model list; is --base-url an OpenAI-compatible server?"
                ) from None
        for card in served:
            if card.get("id") == self.model:
                return card
        names = ", ".join(str(c.get("id")) for c in served) or "none"
        raise CfbenchError(f"model server {self.shown} does not serve --model {self.model!r} (it serves: {names})")

    def generate(self, prompts: list[str], max_new_tokens: int, max_context_tokens: int, stop: tuple[str, ...]) -> list[Completion]:
        encoded = [self.tokens.context(p, max_context_tokens) for p in prompts]
        chunks = [encoded[i : i + self.request_size] for i in range(0, len(encoded), self.request_size)]
        first = call_seed(self.seed, self.calls)  # what the in-process hf engine's call draws with
        seeds = [first] + [call_seed(first, j) for j in range(1, len(chunks))]
        self.calls += 1
        with ThreadPoolExecutor(self.concurrency) as pool:
            answers = list(pool.map(lambda job: self._complete(job[0], max_new_tokens, stop, job[1]), zip(chunks, seeds)))
        return [c for completions in answers for c in completions]

    def _complete(self, chunk: list[list[int]], max_new_tokens: int, stop: tuple[str, ...], seed: int) -> list[Completion]:
        sampling = {"seed": seed} if self.temperature else {}
        with one_line_errors("model server", self._client):
            answer = self._client.completions.create(
                model=self.model,
                prompt=chunk,
                max_tokens=max_new_tokens,
                temperature=self.temperature,
                n=1,
                logprobs=0,
                **sampling,
                **({"stop": list(stop)} if stop else {}),
                extra_body={"include_stop_str_in_output": True, "skip_special_tokens": True, "return_token_ids": True},
            )  # vLLM's fields
        try:
            choices = sorted(answer.choices, key=lambda c: c.index)
            if [c.index for c in choices] != list(range(len(chunk))):
                raise ValueError(f"choice indexes {[c.index for c in choices]} for {len(chunk)} prompts")
            return [_completion(c, stop) for c in choices]
        except (ValueError, AttributeError, TypeError) as err:
            raise CfbenchError(f"model server {self.shown}/completions answered in an unexpected form ({err})") from None

    def describe(self) -> dict:
        cfbench_card = self.card.get("cfbench") or {}
        return {
            "engine": "openai",
            "base_url": self.shown,
            "model": self.model,
            "tokenizer": self.tokenizer_name,
            "chat_template": self.tokens.has_template,
            "prompt_format": "token ids",
            "decoder": f"sampled at temperature {self.temperature}, seed {self.seed}" if self.temperature else "greedy",
            "request_size": self.request_size,
            "concurrency": self.concurrency,
            "timeout_s": self.timeout,
            "retries": self.retries,
            "weights_sha256": cfbench_card.get("weights_sha256"),
            "server": self.card,
        }


def _completion(choice, stop: tuple[str, ...]) -> Completion:
    """A choice as a Completion; the ids and log-probs only where the server gave them (vLLM, serve-model)."""
    stop_reason = getattr(choice, "stop_reason", None)
    text = choice.text
    if isinstance(stop_reason, str) and stop_reason in stop and not text.endswith(stop_reason):
        text += stop_reason
    text = cut_at_stop(text, stop)
    ids = getattr(choice, "token_ids", None)
    ids = tuple(int(i) for i in ids) if ids is not None else None
    logprobs = getattr(choice.logprobs, "token_logprobs", None) if choice.logprobs is not None else None
    logprobs = tuple(float(x) for x in logprobs) if logprobs is not None and ids is not None and len(logprobs) == len(ids) else None
    hit = next((s for s in stop if text.endswith(s)), None)
    return Completion(text, len(ids) if ids is not None else 0, choice.finish_reason or "stop", hit, ids, logprobs)
