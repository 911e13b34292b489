"""Build the engine `--backend` names; heavy imports happen only for the engine chosen."""

from __future__ import annotations

from cfbench.harness.backends import Backend
from cfbench.harness.errors import CfbenchError

BACKENDS = ("hf", "vllm", "openai")


def backend_for(
    kind: str,
    *,
    ckpt: str | None,
    device: str = "cpu",
    dtype: str | None = None,
    threads: int | None = None,
    linear: str = "torch",
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    seed: int = 0,
    **openai,
) -> Backend:
    """The engine `kind` names; `openai` holds OpenAIBackend's keywords (base_url, model, tokenizer, concurrency, ...)."""
    if linear != "torch" and kind != "hf":
        raise CfbenchError(f"--linear {linear} is for --backend hf; drop it")
    if kind == "openai":
        if not openai.get("base_url") or not openai.get("model"):
            raise CfbenchError("--backend openai needs --base-url URL and --model NAME (the name the server serves)")
        if ckpt:
            raise CfbenchError(
                "--backend openai takes the model from the server: drop --ckpt, pass --model (and --tokenizer if it differs)"
            )
        from cfbench.harness.backends.openai import OpenAIBackend

        return OpenAIBackend(**openai)
    if kind not in BACKENDS:
        raise CfbenchError(f"unknown --backend {kind!r}; choose one of {', '.join(BACKENDS)}")
    if not ckpt:
        raise CfbenchError(f"--backend {kind} needs --ckpt (a checkpoint dir, a bundled model such as smollm2-135m, or a hub id)")
    if any(openai.get(k) for k in ("base_url", "model", "tokenizer", "api_key", "organization")):
        raise CfbenchError(
            f"--base-url/--model/--tokenizer/--api-key/--organization are for --backend openai; --backend {kind} loads --ckpt itself"
        )
    from cfbench.harness.checkpoints import resolve

    if kind == "hf":
        check_device(device)
    if kind == "vllm":
        from cfbench.harness.backends.vllm import VLLMBackend, import_vllm

        import_vllm()  # before resolving --ckpt, which may build the bundled model first
        return VLLMBackend(
            resolve(ckpt),
            dtype=dtype or "bfloat16",
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
        )
    from cfbench.harness.backends.hf import HFBackend

    return HFBackend.load(resolve(ckpt), device=device, dtype=dtype or "float32", threads=threads, linear=linear)


def check_loadable(kind: str, ckpt: str | None, device: str) -> None:
    """What a model load would trip over (an unusable --device, a --ckpt that cannot load), refused before anything loads,
    the retriever's index or encoder included; backend_for checks the rest when it builds the engine."""
    if kind == "hf":
        check_device(device)
    if kind in ("hf", "vllm") and ckpt:
        from cfbench.harness.checkpoints import check_available

        check_available(ckpt)


def check_device(device: str) -> None:
    """--device checked before a model loads: torch's own refusal (no CUDA in this build, no such device) as one line."""
    import torch

    try:
        torch.empty(0, device=device)
    except (AssertionError, RuntimeError, NotImplementedError, ValueError) as err:
        cuda = "; install a CUDA build of torch (pytorch.org) or use --device cpu" if "cuda" in device.lower() else "; use --device cpu"
        reason = str(err).strip().splitlines()[0].split(". ")[0][:200] if str(err).strip() else type(err).__name__
        raise CfbenchError(f"--device {device!r} cannot be used with torch {torch.__version__} here ({reason}){cuda}") from None
