"""`cfbench train --treatment warm-start`: TRL's SFTTrainer and a peft LoRA adapter on protocol-v1 trajectories."""

import json
import math
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from cfbench.harness import jsonl
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.checkpoints import ADAPTER_FILES, adapter_hash, resolve
from cfbench.harness.errors import CfbenchError
from cfbench.training.treatments import load_config
from cfbench.training.warmstart import encode, parse_rows, read_data, select, sft_arguments, sft_dataset, warm_start
from tests.warmstart_rows import rows, write


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory, bm25, bundled_corpus):
    path = tmp_path_factory.mktemp("warmstart") / "rows.jsonl.gz"
    write(path, rows(bm25, bundled_corpus))
    return path


@pytest.mark.slow
def test_the_mask_covers_exactly_the_models_own_tokens_and_only_they_carry_loss(trajectories, tiny_llama, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    picked = parse_rows(*read_data(str(trajectories)))
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tokens = PromptTokens(tokenizer)
    episodes = encode(picked, tokens)
    for row, episode in zip(picked, episodes):
        own = [i for i, t in zip(episode.ids, episode.trained) if t]
        read = [i for i, t in zip(episode.ids, episode.trained) if not t]
        assert tokenizer.decode(own) == "".join(t["generated"] for t in row["turns"])
        assert tokenizer.decode(read) == tokens.chat_prompt(row["prompt"]) + "".join(t.get("observation", "") for t in row["turns"])
        assert "<information>" in tokenizer.decode(read) or row["role"] == "proposer"

    config = load_config("warm-start", "cpu-smoke")
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:  # the arguments' full_determinism turns on deterministic kernels process-wide; later tests get the setting back
        trainer = SFTTrainer(
            model=model, args=sft_arguments(config, tmp_path), train_dataset=sft_dataset(episodes), processing_class=tokenizer
        )
    finally:
        torch.use_deterministic_algorithms(deterministic)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(episodes))])
    for row, episode in enumerate(episodes):
        n = len(episode.ids)
        assert batch["input_ids"][row, :n].tolist() == episode.ids
        assert batch["labels"][row, :n].tolist() == [i if t else -100 for i, t in zip(episode.ids, episode.trained)]
        assert (batch["labels"][row, n:] == -100).all()

    # The trainer's loss is the mean cross-entropy over the model's own tokens alone.
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    logprobs = torch.log_softmax(out.logits[:, :-1].double(), dim=-1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    own = batch["labels"][:, 1:] != -100
    assert out.loss.item() == pytest.approx(-(logprobs[own].sum() / own.sum()).item(), rel=1e-5)


def test_the_subset_is_seeded_per_kind_and_refuses_more_than_the_data_holds(trajectories):
    picked = parse_rows(*read_data(str(trajectories)))
    first = select(picked, {"single": 2, "propose-1": "all"}, 0, "rows")
    assert [r["id"] for r in first] == [r["id"] for r in select(picked, {"propose-1": "all", "single": 2}, 0, "rows")]
    assert sorted(r["kind"] for r in first) == ["propose-1", "single", "single"]
    with pytest.raises(CfbenchError, match=r"rows: knob mix.two-hop asks for 1 examples and the data holds 0 of that kind"):
        select(picked, {"two-hop": 1}, 0, "rows")


def test_a_bad_row_is_a_one_line_error_naming_its_line(tmp_path):
    path = tmp_path / "bad.jsonl.gz"
    write(
        path,
        [
            {"id": "a", "role": "solver", "kind": "single", "prompt": "p", "turns": [{"generated": "x", "observation": ""}]},
            {"id": "b", "role": "judge", "kind": "single", "prompt": "p", "turns": [{"generated": "x"}]},
        ],
    )
    with pytest.raises(CfbenchError, match=r"bad.jsonl.gz:2: field role must be one of solver, proposer, got 'judge'"):
        parse_rows(*read_data(str(path)))
    with pytest.raises(CfbenchError, match=r"--steps does not apply to warm-start"):
        load_config("warm-start", "cpu-smoke", steps=3)


@pytest.mark.slow
def test_cpu_smoke_twice_gives_byte_identical_adapters_and_the_cli_exports_one(tmp_path):
    """Once here and once by the CLI in another process (another PYTHONHASHSEED), with the same torch threads, on the shipped data."""
    config = load_config("warm-start", "cpu-smoke")
    first = warm_start(config, tmp_path / "a", command="test")
    dest = tmp_path / "models" / "smollm2-135m-search"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cfbench.cli",
            "train",
            "--treatment",
            "warm-start",
            "--scale",
            "cpu-smoke",
            "--out",
            str(tmp_path / "b"),
            "--threads",
            str(torch.get_num_threads()),
            "--export-adapter",
            str(dest),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ADAPTER_FILES:
        assert (first / name).read_bytes() == (tmp_path / "b" / "adapter" / name).read_bytes() == (dest / name).read_bytes()

    weights = load_file(first / "adapter_model.safetensors")
    assert len(weights) == 30 * 7 * 2  # A and B of every projection of SmolLM2-135M's 30 layers
    assert all(w.abs().sum() > 0 for k, w in weights.items() if "lora_B" in k)  # B starts at zero: every one was trained
    manifest = json.loads((first / "manifest.json").read_text())
    data, _ = read_data("warmstart")
    assert manifest["data_sha256"] == jsonl.sha256(data) and manifest["examples_per_kind"] == config.mix.counts()
    assert manifest["base_model"] == "smollm2-135m" and manifest["base_weights_sha256"] == resolve("smollm2-135m").weights_sha256
    assert manifest["steps"] == 2 and math.isfinite(manifest["final_loss"]) and manifest["adapter_sha256"] == adapter_hash(first)
    assert json.loads((dest / "manifest.json").read_text())["command"].startswith("cfbench train --treatment warm-start")

    with pytest.raises(CfbenchError, match=r"--resume: knob learning_rate was 0.0002 in .*, now 0.001"):
        warm_start(config | {"learning_rate": 0.001}, tmp_path / "a", resume=True)
    again = warm_start(config, tmp_path / "a", resume=True)  # a finished run: resumes at its last checkpoint, trains nothing
    assert again == first and (first / "adapter_model.safetensors").read_bytes() == (dest / "adapter_model.safetensors").read_bytes()
    segments = [json.loads(line) for line in (tmp_path / "a" / "segments.jsonl").read_text().splitlines()]
    assert [(s["from_step"], s["to_step"]) for s in segments] == [(0, 2), (2, 2)]


@pytest.mark.slow
def test_the_proposer_warm_start_continues_the_warm_start_and_its_adapter_stacks_on_it(tmp_path):
    """cpu-smoke of warm-start-proposer: a second adapter over the merged smollm2-135m-search, trained on the proposer data
    (compose-2 included); resolving the adapter merges it onto that model, itself the base with the first adapter merged."""
    config = load_config("warm-start-proposer", "cpu-smoke")
    adapter = warm_start(config, tmp_path / "run", command="test")
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == "smollm2-135m-search"
    manifest = json.loads((adapter / "manifest.json").read_text())
    assert manifest["examples_per_kind"] == {"compose-2": 2, "propose-1": 1, "propose-2": 1}
    assert manifest["base_weights_sha256"] == resolve("smollm2-135m-search").weights_sha256
    merged, start = resolve(str(adapter)), resolve("smollm2-135m-search")
    assert merged.weights_sha256 != start.weights_sha256
    mine, theirs = (load_file(f"{c.location}/model.safetensors") for c in (merged, start))
    assert torch.equal(mine["model.embed_tokens.weight"], theirs["model.embed_tokens.weight"])  # not adapted: the start's own
    assert not torch.equal(mine["model.layers.0.self_attn.q_proj.weight"], theirs["model.layers.0.self_attn.q_proj.weight"])
