"""Rollouts sampled by an OpenAI-compatible server whose weights follow training (knob rollout_server).

The server is vLLM (`vllm serve MODEL --enable-lora --max-lora-rank R` with
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True) or `cfbench serve-model --ckpt MODEL`, serving the run's starting
model. Before a role samples a step's rollouts, its current LoRA adapter is saved to
RUN/rollout-adapters/RUNID-ROLE-step-N and loaded through vLLM's runtime LoRA routes (POST
/v1/load_lora_adapter, then /v1/unload_lora_adapter for the role's previous one); the step's
requests name that adapter as their model, through the same OpenAI-compatible engine evaluation
uses (harness/backends/openai.py), which asks for the sampled token ids and their log-probs. RUNID,
a hash of the run directory, keeps runs sharing a server apart; a run's first load unloads what an
interrupted attempt of it left loaded. Only adapters are synced: a full-weight role would need
vLLM's NCCL or IPC weight transfer, which cannot run here.

The server reads the adapter from the path it is given, so it must see the run directory (the
same machine, or a shared filesystem). Against serve-model the rollouts are exactly the in-process
ones (tests/test_rollout_server.py): it applies the adapter unmerged, as the trainer's own sampler does.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import httpx

from cfbench.harness.backends.openai import OpenAIBackend
from cfbench.harness.errors import CfbenchError

REQUEST_SIZE = 256  # prompts per request: a generate call's whole batch in one request, as the in-process engine decodes it


class AdapterSync:
    """One run's adapters on the rollout server: the latest of each role loaded, the older ones unloaded and deleted."""

    def __init__(self, url: str, out: Path) -> None:
        self.root = url.rstrip("/").removesuffix("/v1")
        self.folder = out / "rollout-adapters"
        self.run = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:8]
        self.loaded: dict[str, tuple[str, Path]] | None = None  # role -> (adapter name, its folder); None before the first load

    def engine(self, accelerator, model, ckpt, config, step: int, role: str, seed: int) -> OpenAIBackend:
        """The role's adapter (a peft model) as it is now, loaded as RUNID-ROLE-step-N; an engine that samples from it.
        Every process calls it together (the main one saves and loads, the others wait)."""
        name = f"{self.run}-{role}-step-{step}"
        if accelerator.is_main_process:
            if self.loaded is None:
                self._forget_earlier_attempts()
            folder = self.folder / name
            # An adapter's embeddings are never trained here; peft's "auto" would look its base up on the hub to check.
            model.save_pretrained(folder, safe_serialization=True, save_embedding_layers=False)
            self._post("load_lora_adapter", {"lora_name": name, "lora_path": str(folder.resolve())})
            previous = self.loaded.get(role)
            if previous is not None:
                self._post("unload_lora_adapter", {"lora_name": previous[0]})
                shutil.rmtree(previous[1], ignore_errors=True)
            self.loaded[role] = (name, folder)
        accelerator.wait_for_everyone()
        return OpenAIBackend(
            self.root, name, tokenizer=str(ckpt.location), request_size=REQUEST_SIZE, temperature=config.temperature, seed=seed
        )

    def _forget_earlier_attempts(self) -> None:
        """Unload this run's adapters that an interrupted attempt left on the server, and their folders."""
        listed = self._call("GET", "models").json().get("data", [])
        for card in listed:
            if str(card.get("id", "")).startswith(f"{self.run}-"):
                self._post("unload_lora_adapter", {"lora_name": card["id"]})
        shutil.rmtree(self.folder, ignore_errors=True)
        self.loaded = {}

    def _post(self, route: str, body: dict) -> None:
        self._call("POST", route, body)

    def _call(self, method: str, route: str, body: dict | None = None) -> httpx.Response:
        url = f"{self.root}/v1/{route}"
        try:
            answer = httpx.request(method, url, json=body, timeout=600.0)
        except httpx.HTTPError as err:
            raise CfbenchError(f"rollout server {url}: {type(err).__name__}: {err}; is it running (knob rollout_server)?") from None
        if answer.status_code >= 400:
            text = " ".join(answer.text.split())[:300]
            raise CfbenchError(
                f"rollout server {url} answered {answer.status_code}: {text}; it must load LoRA adapters at runtime "
                "(vLLM: --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; or cfbench serve-model) and see the run directory"
            )
        return answer
