"""`--ckpt smollm2-135m-search`: the bundled base with a committed LoRA adapter merged in by peft, cached until the adapter changes."""

import json

import pytest
import torch
from safetensors.torch import load_file

from cfbench.harness import checkpoints
from cfbench.harness.checkpoints import Adapter, resolve
from cfbench.harness.errors import CfbenchError


def random_adapter(base: str, out, seed: int) -> None:
    """A LoRA adapter with random A and B (peft starts B at zero, which would merge to the base unchanged)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
            LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "down_proj"], init_lora_weights=False),
        )
    model.save_pretrained(out, save_embedding_layers=False)


@pytest.mark.slow
def test_the_adapted_name_merges_the_adapter_and_merges_again_when_it_changes(tmp_path, monkeypatch):
    base = resolve("smollm2-135m")
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    (cache / "models" / "smollm2-135m").symlink_to(base.location)  # the base as already materialised; no download
    monkeypatch.setenv("CFBENCH_CACHE", str(cache))
    adapter = tmp_path / "adapter"
    random_adapter(base.location, adapter, seed=1)
    monkeypatch.setitem(checkpoints.ADAPTED, "smollm2-135m-search", Adapter(base="smollm2-135m", directory=adapter))

    merged = resolve("smollm2-135m-search")
    assert merged.location == str(cache / "models" / "smollm2-135m-search") and merged.weights_sha256 != base.weights_sha256
    source = json.loads((cache / "models" / "smollm2-135m-search" / "cfbench_source.json").read_text())
    assert source["adapter_sha256"] == checkpoints.adapter_hash(adapter) and source["base_weights_sha256"] == base.weights_sha256
    before, after = load_file(f"{base.location}/model.safetensors"), load_file(f"{merged.location}/model.safetensors")
    lora = load_file(adapter / "adapter_model.safetensors")
    key = "model.layers.0.self_attn.q_proj.weight"
    a, b = (lora[f"base_model.model.{key.removesuffix('.weight')}.lora_{x}.weight"].double() for x in "AB")
    assert torch.equal(after[key], (before[key].double() + 2.0 * b @ a).float())  # scaling alpha / r = 2, rounded once
    assert torch.equal(after["model.layers.0.self_attn.k_proj.weight"], before["model.layers.0.self_attn.k_proj.weight"])

    stamp = (cache / "models" / "smollm2-135m-search" / "model.safetensors").stat().st_mtime_ns
    assert resolve("smollm2-135m-search") == merged  # the cache is reused while the adapter is the same
    assert (cache / "models" / "smollm2-135m-search" / "model.safetensors").stat().st_mtime_ns == stamp

    random_adapter(base.location, adapter, seed=2)
    changed = resolve("smollm2-135m-search")
    assert changed.weights_sha256 not in (merged.weights_sha256, base.weights_sha256)
    assert json.loads((cache / "models" / "smollm2-135m-search" / "cfbench_source.json").read_text())[
        "adapter_sha256"
    ] == checkpoints.adapter_hash(adapter)

    (adapter / "adapter_model.safetensors").unlink()
    with pytest.raises(CfbenchError, match=r"adapter .* has no adapter_model.safetensors; restore it from git or export it again"):
        resolve("smollm2-135m-search")


def test_a_trained_adapter_directory_is_merged_into_the_base_it_names_and_cached(tmp_path, tiny_llama, monkeypatch):
    """--ckpt RUN/checkpoint-N of a lora run: the adapter over its base scores like the unmerged model, cached by both hashes."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("CFBENCH_CACHE", str(tmp_path / "cache"))
    adapter = tmp_path / "checkpoint-3"
    random_adapter(str(tiny_llama), adapter, seed=1)
    settings = json.loads((adapter / "adapter_config.json").read_text())
    assert settings["base_model_name_or_path"] == str(tiny_llama)

    merged = resolve(str(adapter))
    assert merged.name == str(adapter) and merged.location.startswith(str(tmp_path / "cache" / "models" / "adapted"))
    assert merged.weights_sha256 != resolve(str(tiny_llama)).weights_sha256
    ids = torch.tensor([[1, 5, 9, 200, 7]])
    unmerged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float64), adapter)
    want = unmerged(ids).logits.float()
    got = AutoModelForCausalLM.from_pretrained(merged.location, dtype=torch.float32)(ids).logits
    assert torch.allclose(got, want, atol=1e-4)
    assert resolve(str(adapter)) == merged  # cached

    random_adapter(str(tiny_llama), adapter, seed=2)  # another adapter, another cache entry
    assert resolve(str(adapter)).location != merged.location

    for base, error in (("", "names no base_model_name_or_path"), ("org/model", "is a hub id, whose weights cfbench cannot pin")):
        (adapter / "adapter_config.json").write_text(json.dumps({**settings, "base_model_name_or_path": base}))
        with pytest.raises(CfbenchError, match=error):
            resolve(str(adapter))
    (adapter / "adapter_config.json").write_text("{not json")
    with pytest.raises(CfbenchError, match=r"adapter_config.json is not JSON \(.* at line 1\); restore it"):
        resolve(str(adapter))
