"""vLLM offline engine (extra `[vllm]`, CUDA only; imported only when `--backend vllm` is chosen).

One `LLM.generate` call per turn for all active trajectories, greedy, stop strings kept in the
output, prefix caching on (a trajectory's earlier turns are a prefix of its next prompt). Prompts go
in as token ids from cfbench.harness.backends.tokens, so tokenisation and context cuts match the hf engine.

Determinism: greedy decoding with a fixed seed is repeatable for the same batch on the same GPU and
vLLM version. Batch composition can still move float sums, so for batch-invariant numbers set
`VLLM_BATCH_INVARIANT=1` (vLLM >= 0.11) before starting; the run record notes whether it was set.
"""

from __future__ import annotations

import os

from cfbench.harness.backends import Completion
from cfbench.harness.backends.tokens import PromptTokens, TokenizedEngine
from cfbench.harness.checkpoints import ResolvedCheckpoint
from cfbench.harness.errors import CfbenchError
from cfbench.harness.protocol import cut_at_stop


def import_vllm():
    """The vllm module, or a one-line error saying how to get it."""
    try:
        import vllm
    except ImportError:
        raise CfbenchError(
            "--backend vllm needs vLLM (CUDA only): pip install 'cfbench[vllm]' on a GPU machine, or use --backend hf / --backend openai"
        ) from None
    return vllm


class VLLMBackend(TokenizedEngine):
    def __init__(
        self,
        ckpt: ResolvedCheckpoint,
        *,
        dtype: str = "bfloat16",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        seed: int = 0,
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        self.ckpt = ckpt
        self.settings = {
            "dtype": dtype,
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": max_model_len,
            "seed": seed,
        }
        self.llm = vllm.LLM(model=ckpt.location, tokenizer=ckpt.location, enable_prefix_caching=True, **self.settings)
        self.tokens = PromptTokens(self.llm.get_tokenizer())

    def generate(self, prompts: list[str], max_new_tokens: int, max_context_tokens: int, stop: tuple[str, ...]) -> list[Completion]:
        params = self._vllm.SamplingParams(
            temperature=0.0, max_tokens=max_new_tokens, stop=list(stop) or None, include_stop_str_in_output=True, skip_special_tokens=True
        )
        inputs = [{"prompt_token_ids": self.tokens.context(p, max_context_tokens)} for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        completions = []
        for out in outputs:
            first = out.outputs[0]
            text = cut_at_stop(first.text, stop)
            hit = next((s for s in stop if text.endswith(s)), None)
            completions.append(
                Completion(text, len(first.token_ids), "stop" if first.finish_reason == "stop" else "length", hit, tuple(first.token_ids))
            )
        return completions

    def describe(self) -> dict:
        return {
            "engine": "vllm",
            "vllm": self._vllm.__version__,
            "decoder": "greedy, prefix caching",
            "batch_invariant": os.environ.get("VLLM_BATCH_INVARIANT") == "1",
            "chat_template": self.tokens.has_template,
            **self.settings,
            **self.ckpt.describe(),
        }
