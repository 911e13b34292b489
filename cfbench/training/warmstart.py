"""`cfbench train --treatment warm-start`: supervised fine-tuning on protocol-v1 trajectories with TRL's SFTTrainer
and a peft LoRA adapter; the adapter it exports is the bundled model `smollm2-135m-search` (harness/checkpoints.py).

Each row of the data (tasks/train/warmstart.jsonl.gz, made by tasks/build_warmstart.py) is encoded
exactly like a GRPO episode (training/core/episodes.py): the chat prompt, then each turn's generated
text and its observation, tokenised piece by piece. Its mask of the model's own tokens becomes
SFTTrainer's `completion_mask`, so the prompt and every retrieved <information> block are labelled
-100 and only what the model itself writes is trained, as GRPO trains it. The examples are a seeded
subset with a fixed number per trajectory kind (the config's `mix`).

Run directory:
    config.json        the config (every knob, and the data's sha256), fixed for the run; --resume refuses another
    checkpoint-N/      transformers Trainer checkpoints (adapter, optimizer, scheduler, RNG, trainer_state.json)
    segments.jsonl     one row per invocation: command, threads, steps, wall seconds (a resumed run has several)
    adapter/           the final adapter_config.json + adapter_model.safetensors and manifest.json (how it was made)
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import torch

from cfbench.harness import jsonl
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.checkpoints import adapter_hash, load_model, resolve
from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import TASKS_DIR
from cfbench.harness.runrecord import dumps, write_atomic
from cfbench.training.config.classes import WarmStartConfig
from cfbench.training.config.schema import to_json
from cfbench.training.core.data import bundled_train_sets
from cfbench.training.core.episodes import Episode, encode_episode
from cfbench.training.core.learner import append_row, checkpoints
from cfbench.training.trainer import check_config

ROLES = ("solver", "proposer")
MANIFEST = "manifest.json"
_STATE = "trainer_state.json"  # the Trainer writes it last: a checkpoint without it was cut short


def read_data(spec: str) -> tuple[bytes, str]:
    """The data's bytes and where they came from: a bundled training set (hash-checked by the manifest) or a file."""
    bundled = bundled_train_sets()
    if spec in bundled:
        path = TASKS_DIR / bundled[spec]["file"]
        return jsonl.read_verified(path, bundled[spec]["sha256"]), str(path)
    if not Path(spec).is_file():
        raise CfbenchError(
            f"warm-start data {spec!r}: not a bundled training set ({', '.join(bundled)}) and no such file; "
            "build it with `python -m cfbench.tasks.build_warmstart` or fix knob data"
        )
    return jsonl.read_bytes(Path(spec)), spec


def parse_rows(data: bytes, where: str) -> list[dict]:
    """The trajectories, each checked: a bad field is a one-line error naming its line."""
    rows = []
    for lineno, row in jsonl.iter_rows(Path(where), data):
        place = f"{where}:{lineno}"
        for field in ("id", "kind", "prompt"):
            if not isinstance(row.get(field), str) or not row[field].strip():
                raise CfbenchError(f"{place}: field {field} must be a non-empty string, got {row.get(field)!r}; rebuild the data")
        if row.get("role") not in ROLES:
            raise CfbenchError(f"{place}: field role must be one of {', '.join(ROLES)}, got {row.get('role')!r}; rebuild the data")
        turns = row.get("turns")
        if not (
            isinstance(turns, list)
            and turns
            and all(
                isinstance(t, dict) and isinstance(t.get("generated"), str) and t["generated"] and isinstance(t.get("observation", ""), str)
                for t in turns
            )
        ):
            raise CfbenchError(f"{place}: field turns must be a non-empty list of {{generated, observation}} strings; rebuild the data")
        rows.append(row)
    return rows


def select(rows: list[dict], mix: dict, seed: int, where: str) -> list[dict]:
    """mix[kind] rows of each kind (all of them for "all"), drawn with a generator seeded by (seed, kind), then shuffled."""
    by_kind: dict[str, list[dict]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row)
    picked = []
    for kind, count in sorted(mix.items()):
        pool = by_kind.get(kind, [])
        wanted = len(pool) if count == "all" else count
        if wanted > len(pool):
            raise CfbenchError(
                f"{where}: knob mix.{kind} asks for {count} examples and the data holds {len(pool)} of that kind "
                f"(kinds: {', '.join(f'{k} {len(v)}' for k, v in sorted(by_kind.items()))}); lower it"
            )
        picked += random.Random(f"{seed}:{kind}").sample(pool, wanted)
    random.Random(seed).shuffle(picked)
    return picked


def encode(rows: list[dict], tokens: PromptTokens) -> list[Episode]:
    return [encode_episode(tokens, tokens.chat_prompt(row["prompt"]), row["turns"], 0.0, 0) for row in rows]


def sft_dataset(episodes: list[Episode]):
    """The pre-tokenised dataset SFTTrainer takes as is: `completion_mask` 1 on the model's own tokens."""
    from datasets import Dataset

    return Dataset.from_dict({"input_ids": [e.ids for e in episodes], "completion_mask": [e.trained for e in episodes]})


def sft_arguments(config: WarmStartConfig, out: Path):
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(out),
        seed=config.seed,
        data_seed=config.seed,
        full_determinism=True,
        use_cpu=not torch.cuda.is_available(),
        bf16=config.bf16,
        num_train_epochs=config.epochs,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accumulation,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler,
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        optim="adamw_torch",
        max_length=config.max_length,
        completion_only_loss=True,
        activation_checkpointing=config.gradient_checkpointing,
        logging_steps=1,
        save_strategy="steps",
        save_steps=config.save_every,
        save_total_limit=1,
        report_to="none",
    )


def warm_start(config: WarmStartConfig, out: Path, *, resume: bool = False, command: str = "") -> Path:
    """Train (or finish) the adapter into `out`; returns out/adapter, which holds the adapter and its manifest."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, enable_full_determinism
    from trl import SFTTrainer

    began = time.time()
    if config.bf16 and not torch.cuda.is_available():
        raise CfbenchError("knob bf16 is true and no GPU is visible: this scale runs on GPUs (the CPU scales train in float32)")
    data, where = read_data(config.data)
    config = dataclasses.replace(config, data_sha256=jsonl.sha256(data))  # a resume refuses changed data like any changed knob
    check_config(config, out, resume)
    picked = select(parse_rows(data, where), config.mix.counts(), config.seed, where)
    ckpt = resolve(config.model)
    tokenizer = AutoTokenizer.from_pretrained(ckpt.location)
    episodes = encode(picked, PromptTokens(tokenizer))
    dataset = sft_dataset(episodes)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "config.json", dumps(to_json(config)) + "\n")
    start = _last_complete_checkpoint(out) if resume else None

    deterministic = torch.are_deterministic_algorithms_enabled()
    enable_full_determinism(config.seed)  # seeds before the LoRA matrices are drawn, and deterministic kernels
    try:
        lora = config.lora
        model = get_peft_model(
            load_model(AutoModelForCausalLM, ckpt.location, torch.float32),
            LoraConfig(
                task_type="CAUSAL_LM",
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
            ),
        )
        trainer = SFTTrainer(model=model, args=sft_arguments(config, out), train_dataset=dataset, processing_class=tokenizer)
        first = 0 if start is None else json.loads((start / _STATE).read_text())["global_step"]
        trained = trainer.train(resume_from_checkpoint=None if start is None else str(start))
    finally:
        torch.use_deterministic_algorithms(deterministic)  # full determinism is this run's setting, not the caller's process's
    if not trainer.is_world_process_zero():  # under accelerate launch the first process writes the results
        return out / "adapter"
    append_row(
        out / "segments.jsonl",
        {
            "command": command,
            "threads": torch.get_num_threads(),
            "from_step": first,
            "to_step": trainer.state.global_step,
            "train_seconds": round(trained.metrics["train_runtime"], 1),
            "wall_seconds": round(time.time() - began, 1),
        },
    )
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        adapter = _save_adapter(model, config.model, Path(scratch))
        write_atomic(
            adapter / MANIFEST,
            json.dumps(_manifest(config, out, ckpt, picked, episodes, trainer, adapter), indent=2, sort_keys=True) + "\n",
        )
        shutil.rmtree(out / "adapter", ignore_errors=True)
        os.replace(adapter, out / "adapter")
    return out / "adapter"


def _save_adapter(model, base: str, scratch: Path) -> Path:
    """scratch/adapter: the adapter's weights and a config that is the same bytes on every machine and process."""
    model.save_pretrained(scratch, save_embedding_layers=False)  # embeddings are not trained; "auto" would query the hub
    adapter = scratch / "adapter"
    adapter.mkdir()
    os.replace(scratch / "adapter_model.safetensors", adapter / "adapter_model.safetensors")
    settings = json.loads((scratch / "adapter_config.json").read_text())
    # peft keeps target_modules as a set (its order follows PYTHONHASHSEED) and records where the base was loaded from
    settings.update(target_modules=sorted(settings["target_modules"]), base_model_name_or_path=base)
    (adapter / "adapter_config.json").write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    return adapter


def export_adapter(adapter: Path, dest: Path) -> None:
    """Copy a run's adapter and manifest to `dest` (e.g. cfbench/models/smollm2-135m-search), replacing it whole."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}-") as scratch:
        staged = Path(scratch) / dest.name
        shutil.copytree(adapter, staged)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(staged, dest)


def _last_complete_checkpoint(out: Path) -> Path | None:
    """The latest checkpoint the Trainer finished writing; newer ones a kill cut short are removed (they hold no state)."""
    done = checkpoints(out)
    while done and not (done[-1][1] / _STATE).is_file():
        shutil.rmtree(done.pop()[1])
    return done[-1][1] if done else None


def _manifest(config: WarmStartConfig, out: Path, ckpt, picked: list[dict], episodes: list[Episode], trainer, adapter: Path) -> dict:
    segments = [json.loads(line) for line in (out / "segments.jsonl").read_text().splitlines() if line.strip()]
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    return {
        "base_model": config.model,
        "base_weights_sha256": ckpt.weights_sha256,
        "data": config.data,
        "data_sha256": config.data_sha256,
        "examples": len(picked),
        "examples_per_kind": dict(sorted(Counter(row["kind"] for row in picked).items())),
        "tokens": sum(len(e.ids) for e in episodes),
        "trained_tokens": sum(sum(e.trained) for e in episodes),
        "config": to_json(config),
        "seed": config.seed,
        "command": segments[-1]["command"],
        "steps": trainer.state.global_step,
        "final_loss": losses[-1] if losses else None,
        "train_seconds": round(sum(s["train_seconds"] for s in segments), 1),  # the Trainer's loop alone
        "wall_seconds": round(sum(s["wall_seconds"] for s in segments), 1),
        "segments": segments,  # with loading and encoding
        "adapter_sha256": adapter_hash(adapter),
        "versions": {name: version(name) for name in ("torch", "transformers", "trl", "peft")},
    }
