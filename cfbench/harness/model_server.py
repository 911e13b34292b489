"""`cfbench serve-model`: a local HF checkpoint behind OpenAI-compatible endpoints.

    GET  /v1/models             -> {"object": "list", "data": [{"id": NAME, ..., "cfbench": engine description}]}
    POST /v1/completions        prompt: text, token ids, or a list of either; max_tokens, stop,
                                temperature and seed, logprobs 0 (the sampled tokens' log-probs), and
                                vLLM's include_stop_str_in_output / add_special_tokens / return_token_ids
    POST /v1/chat/completions   messages through the model's chat template
    GET  /health
    POST /v1/load_lora_adapter  {"lora_name", "lora_path"}: serve a peft LoRA adapter over the model as model
                                `lora_name` (vLLM's runtime LoRA route and body); 400 for a name already served;
                                403 for a path not under the folder given with --adapters (the route takes
                                paths from unauthenticated requests, so it reads nothing outside that folder;
                                without --adapters it loads nothing)
    POST /v1/unload_lora_adapter {"lora_name"}: stop serving it; 404 for a name not served

Greedy at temperature 0 (the default); above it, sampled with a generator seeded with the request's
seed (0 when none is given, so the server stays deterministic). One request's prompts decode as one
batch (requests take turns), so a client that sends a turn's prompts in one request gets exactly
what the in-process hf engine gives, sampled or not. Bad requests get an OpenAI-style error
({"error": {"message", "type", "param"}}) and the server keeps serving. An adapter is applied
unmerged, as peft computes it in training, so a trainer syncing its adapter here
(training/core/served.py) samples exactly what its in-process sampler would; the model's own name
keeps serving the model without it.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
from pathlib import Path

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool

from cfbench.harness.backends import Completion
from cfbench.harness.backends.hf import HFBackend

MAX_PROMPTS = 256


class _Refused(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")  # other OpenAI fields (user, logit_bias, ...) change nothing here
    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    include_stop_str_in_output: bool = False


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    add_special_tokens: bool = True
    return_token_ids: bool = False
    logprobs: int | None = None


class LoadAdapter(BaseModel):
    lora_name: str
    lora_path: str


class UnloadAdapter(BaseModel):
    lora_name: str


class Message(BaseModel):
    role: str
    content: str


class ChatRequest(_Sampling):
    messages: list[Message]
    max_completion_tokens: int | None = None


def make_app(backend: HFBackend, name: str, adapters: Path | None = None) -> FastAPI:
    """`adapters`: the folder load_lora_adapter may read adapters from (None: it loads none)."""
    app = FastAPI(title="cfbench model server")
    lock = threading.Lock()  # one batch at a time: the decoder and its K/V reuse are not thread-safe
    tokenizer = backend.tokens.tokenizer
    max_len = backend.model.config.max_position_embeddings
    ids = itertools.count()
    card = {"id": name, "object": "model", "created": 0, "owned_by": "cfbench", "max_model_len": max_len, "cfbench": backend.describe()}
    served = _Adapters(backend)

    @app.exception_handler(_Refused)
    async def refused(_: Request, err: _Refused):
        kind = {403: "permission_error", 404: "not_found_error"}.get(err.status, "invalid_request_error")
        return JSONResponse({"error": {"message": err.message, "type": kind, "param": err.param, "code": err.code}}, status_code=err.status)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "model": name}

    @app.get("/v1/models")
    def models() -> dict:
        with lock:
            adapters = [
                {"id": n, "object": "model", "created": 0, "owned_by": "cfbench", "max_model_len": max_len, "root": p, "parent": name}
                for n, p in served.paths.items()
            ]
        return {"object": "list", "data": [card, *adapters]}

    @app.post("/v1/load_lora_adapter")
    async def load_adapter(raw: Request):
        request = _parse(LoadAdapter, await raw.body())
        if request.lora_name == name:
            raise _Refused(400, f"{name!r} is the served model's own name; give the adapter another lora_name", "lora_name")
        if adapters is None:
            raise _Refused(403, "this server loads no adapters; start serve-model with --adapters FOLDER, save them under it", "lora_path")
        # resolved, so neither `..` nor a symbolic link inside the folder leads out of it
        if not Path(request.lora_path).resolve().is_relative_to(adapters.resolve()):
            raise _Refused(
                403, f"lora_path {request.lora_path!r} is not under this server's adapters folder (--adapters); save it there", "lora_path"
            )

        def load() -> None:
            with lock:
                served.load(request.lora_name, Path(request.lora_path))

        await run_in_threadpool(load)
        return f"Success: LoRA adapter '{request.lora_name}' added successfully."

    @app.post("/v1/unload_lora_adapter")
    async def unload_adapter(raw: Request):
        request = _parse(UnloadAdapter, await raw.body())

        def unload() -> None:
            with lock:
                served.unload(request.lora_name)

        await run_in_threadpool(unload)
        return f"Success: LoRA adapter '{request.lora_name}' removed successfully."

    @app.post("/v1/completions")
    async def completions(raw: Request):
        request = _parse(CompletionRequest, await raw.body())
        prompts = _token_prompts(request, tokenizer)
        outs = await run_in_threadpool(
            decode, request, prompts, request.max_tokens if request.max_tokens is not None else 16, "max_tokens", "prompt"
        )
        choices = [
            {
                "index": i,
                "text": _shown(c, request),
                "logprobs": _logprobs(c, tokenizer) if request.logprobs is not None else None,
                "finish_reason": c.finish,
                "stop_reason": c.stop,
                **({"token_ids": list(c.ids)} if request.return_token_ids else {}),
            }
            for i, c in enumerate(outs)
        ]
        return {
            "id": f"cmpl-{next(ids)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": name,
            "choices": choices,
            "usage": _usage(prompts, outs),
        }

    @app.post("/v1/chat/completions")
    async def chat(raw: Request):
        request = _parse(ChatRequest, await raw.body())
        if not backend.tokens.has_template:
            raise _Refused(400, f"model {name!r} has no chat template; use /v1/completions", "messages")
        if not request.messages:
            raise _Refused(400, "messages must not be empty", "messages")
        text = tokenizer.apply_chat_template([m.model_dump() for m in request.messages], tokenize=False, add_generation_prompt=True)
        prompt = backend.tokens.encode(text)
        # OpenAI's max_completion_tokens replaces the deprecated max_tokens when given, 0 included (which is refused)
        param = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
        limit = getattr(request, param)
        outs = await run_in_threadpool(decode, request, [prompt], limit if limit is not None else max_len - len(prompt), param, "messages")
        [out] = outs
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": _shown(out, request)},
            "logprobs": None,
            "finish_reason": out.finish,
            "stop_reason": out.stop,
        }
        return {
            "id": f"chatcmpl-{next(ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": name,
            "choices": [choice],
            "usage": _usage([prompt], outs),
        }

    def decode(request: _Sampling, prompts: list[list[int]], max_tokens: int, limit_param: str, prompt_param: str) -> list[Completion]:
        temperature = request.temperature or 0.0
        if not 0 <= temperature <= 2:
            raise _Refused(400, f"temperature must be between 0 and 2, got {temperature}", "temperature")
        if getattr(request, "logprobs", None) not in (None, 0):
            raise _Refused(400, "serve-model gives the sampled tokens' log-probs only: logprobs must be 0", "logprobs")
        if request.n != 1 or request.stream:
            raise _Refused(
                400, "serve-model returns one complete answer per prompt: n must be 1 and stream false", "n" if request.n != 1 else "stream"
            )
        longest = max(len(p) for p in prompts)
        if longest >= max_len:  # OpenAI's wording and code for a prompt with no room left to generate
            raise _Refused(
                400,
                f"This model's maximum context length is {max_len} tokens. However, your {prompt_param} resulted in "
                f"{longest} tokens. Please reduce the length of the {prompt_param}.",
                prompt_param,
                "context_length_exceeded",
            )
        if max_tokens < 1:
            raise _Refused(400, f"{limit_param} must be at least 1, got {max_tokens}", limit_param)
        if longest + max_tokens > max_len:
            raise _Refused(
                400,
                f"this model's maximum context length is {max_len} tokens; the request asks for {longest} prompt + {max_tokens} new tokens",
                limit_param,
                "context_length_exceeded",
            )
        stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
        with lock:  # adapters are loaded and unloaded under it too
            if request.model != name and request.model not in served.paths:
                names = ", ".join(repr(n) for n in [name, *served.paths])
                raise _Refused(404, f"model {request.model!r} is not served here; this server serves {names}", "model")
            engine, applied = served.engine(request.model) if request.model != name else (backend, served.without_adapters())
            with applied:
                return engine.complete(prompts, max_tokens, stop, temperature, request.seed or 0)

    return app


class _Adapters:
    """The LoRA adapters served over one model: a peft model wraps it once the first is loaded.

    Each adapter decodes through its own engine, so K/V kept for a context's next turn
    (backends/hf.py) is only ever reused under the weights that computed it."""

    def __init__(self, backend: HFBackend) -> None:
        self.backend = backend
        self.peft = None
        self.paths: dict[str, str] = {}
        self.engines: dict[str, HFBackend] = {}

    def load(self, lora_name: str, path: Path) -> None:
        from peft import PeftModel

        if lora_name in self.paths:
            raise _Refused(
                400, f"The lora adapter {lora_name!r} has already been loaded; unload it first or choose another lora_name", "lora_name"
            )
        if not (path / "adapter_config.json").is_file():
            raise _Refused(400, f"lora_path {str(path)!r} holds no adapter_config.json; pass a peft LoRA adapter directory", "lora_path")
        if self.backend.linear != "torch":
            raise _Refused(
                400, f"adapters need the model's own linear layers; start serve-model with --linear torch, not {self.backend.linear}"
            )
        self._check_shapes(path)  # before peft changes the served model: a mismatch found midway would leave part of it applied
        try:
            if self.peft is None:
                self.peft = PeftModel.from_pretrained(self.backend.model, path, adapter_name=lora_name).eval()
            else:
                self.peft.load_adapter(path, adapter_name=lora_name)
        except (ValueError, RuntimeError, OSError, KeyError) as err:
            if self.peft is not None and lora_name in self.peft.peft_config:
                self.peft.delete_adapter(lora_name)
            message = " ".join(str(err).split())[:300]
            raise _Refused(
                400, f"could not load the adapter in {str(path)!r} over this model: {type(err).__name__}: {message}", "lora_path"
            ) from None
        self.peft.set_adapter(lora_name)  # an adapter peft knows is active, so disable_adapter() works for the model's own name
        b = self.backend
        self.engines[lora_name] = HFBackend(self.peft, b.tokens, ckpt=b.ckpt, dtype=b.dtype)
        self.paths[lora_name] = str(path)

    def _check_shapes(self, path: Path) -> None:
        """Refuse an adapter whose LoRA matrices do not fit the served model's linear layers (read from the file's header)."""
        from safetensors import safe_open

        weights = path / "adapter_model.safetensors"
        if not weights.is_file():
            raise _Refused(
                400, f"lora_path {str(path)!r} holds no adapter_model.safetensors; pass a peft LoRA adapter directory", "lora_path"
            )
        modules = dict(self.backend.model.named_modules())
        with safe_open(weights, "pt") as f:
            for key in f.keys():
                found = re.fullmatch(r"base_model\.model\.(.+)\.lora_([AB])(?:\.\w+)?\.weight", key)
                if found is None:
                    continue
                layer, (rows, cols) = modules.get(found.group(1)), f.get_slice(key).get_shape()
                layer = layer.get_base_layer() if hasattr(layer, "get_base_layer") else layer  # already wrapped by a loaded adapter
                fits = isinstance(layer, torch.nn.Linear) and (
                    cols == layer.in_features if found.group(2) == "A" else rows == layer.out_features
                )
                if not fits:
                    raise _Refused(
                        400, f"the adapter in {str(path)!r} does not fit this model: {key} has shape {[rows, cols]}", "lora_path"
                    )

    def unload(self, lora_name: str) -> None:
        if lora_name not in self.paths:
            raise _Refused(404, f"The lora adapter {lora_name!r} cannot be found", "lora_name")
        self.peft.delete_adapter(lora_name)
        del self.paths[lora_name], self.engines[lora_name]

    def engine(self, lora_name: str):
        """(the adapter's engine, a context that applies it alone)."""
        self.peft.set_adapter(lora_name)
        return self.engines[lora_name], contextlib.nullcontext()

    def without_adapters(self):
        return self.peft.disable_adapter() if self.peft is not None and self.paths else contextlib.nullcontext()


def _parse(model: type[BaseModel], body: bytes):
    try:
        return model.model_validate_json(body)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(map(str, first["loc"])) or "body"
        raise _Refused(400, f"bad request: {where}: {first['msg']}", where) from None


def _token_prompts(request: CompletionRequest, tokenizer) -> list[list[int]]:
    """The request's prompts as token ids; text is tokenised as vLLM does (add_special_tokens)."""
    prompt = request.prompt
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        prompt = [prompt]
    if not prompt or len(prompt) > MAX_PROMPTS:
        raise _Refused(400, f"prompt must hold 1 to {MAX_PROMPTS} prompts, got {len(prompt)}", "prompt")
    out = []
    for i, p in enumerate(prompt):
        ids = tokenizer(p, add_special_tokens=request.add_special_tokens)["input_ids"] if isinstance(p, str) else p
        if not ids:
            raise _Refused(400, f"prompt {i} is empty", "prompt")
        if not all(0 <= t < len(tokenizer) for t in ids):
            raise _Refused(400, f"prompt {i} holds token ids outside the vocabulary (0..{len(tokenizer) - 1})", "prompt")
        out.append(ids)
    return out


def _shown(out: Completion, request: _Sampling) -> str:
    """OpenAI leaves the stop string out of the text; vLLM keeps it when asked to."""
    if out.stop and not request.include_stop_str_in_output:
        return out.text[: -len(out.stop)]
    return out.text


def _logprobs(out: Completion, tokenizer) -> dict:
    """OpenAI's completion logprobs object for the sampled tokens (no alternatives: logprobs is 0)."""
    tokens = tokenizer.convert_ids_to_tokens(list(out.ids))
    return {"tokens": tokens, "token_logprobs": list(out.logprobs), "top_logprobs": None, "text_offset": None}


def _usage(prompts: list[list[int]], outs: list[Completion]) -> dict:
    prompt_tokens, completion_tokens = sum(map(len, prompts)), sum(c.tokens for c in outs)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}


def serve(backend: HFBackend, name: str, host: str, port: int, adapters: Path | None = None) -> None:
    import uvicorn

    uvicorn.run(make_app(backend, name, adapters), host=host, port=port, log_level="warning")
