"""Training rollouts sampled by a served model whose adapter follows training (knob rollout_server,
training/core/served.py): `cfbench serve-model` on loopback, loaded and unloaded through vLLM's runtime
LoRA routes, gives exactly the in-process run."""

import hashlib
import json

import pytest
import requests
import torch
from safetensors.torch import load_file

from cfbench.harness.errors import CfbenchError
from cfbench.training.trainer import train
from cfbench.training.treatments import load_config
from servers import cli_server, free_port

pytestmark = pytest.mark.slow  # serves the warm start in a subprocess and trains two steps twice

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
TIMES = {"rollout_s", "update_s", "cpu_s"}


def lora_config():
    # A learning rate far above a real run's, so step 1's update changes what step 2 samples.
    return load_config("search-r1", "cpu-smoke", 2, 1) | {"lora": LORA, "learning_rate": 1e-2}


@pytest.fixture(scope="module")
def served_warm_start(tmp_path_factory):
    adapters = str(tmp_path_factory.getbasetemp())  # every test's tmp_path is under it
    with cli_server(["serve-model", "--ckpt", "smollm2-135m-search", "--name", "warm-start", "--adapters", adapters]) as url:
        yield url


def rows(run, name):
    return [json.loads(line) for line in (run / name).read_text().splitlines()]


def test_a_lora_run_sampled_by_serve_model_equals_the_in_process_run(tmp_path, served_warm_start):
    train(lora_config(), tmp_path / "local")
    train(lora_config() | {"rollout_server": served_warm_start + "/v1"}, tmp_path / "served")
    local, served = tmp_path / "local", tmp_path / "served"
    for step in (1, 2):
        assert rows(served, f"rollouts/step-{step}.jsonl") == rows(local, f"rollouts/step-{step}.jsonl")
    drop = [{k: v for k, v in r.items() if k not in TIMES} for r in rows(local, "metrics.jsonl")]
    assert [{k: v for k, v in r.items() if k not in TIMES} for r in rows(served, "metrics.jsonl")] == drop
    assert all(r["sampler_gap"] < 1e-4 for r in rows(served, "metrics.jsonl"))  # the server sampled from the trainer's weights
    for name in ("checkpoint-1", "checkpoint-2"):
        a, b = (load_file(run / name / "adapter_model.safetensors") for run in (local, served))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    # step 2 sampled with step 1's adapter, which the update had moved; only the latest stays loaded
    run = hashlib.sha256(str(served.resolve()).encode()).hexdigest()[:8]  # keeps runs that share a server apart
    synced = load_file(served / "rollout-adapters" / f"{run}-policy-step-2" / "adapter_model.safetensors")
    after_step_1 = load_file(served / "checkpoint-1" / "adapter_model.safetensors")
    assert synced.keys() == after_step_1.keys() and all(torch.equal(synced[k], after_step_1[k]) for k in synced)
    assert any(v.abs().max() > 0 for k, v in synced.items() if "lora_B" in k)  # B starts at zero: the update moved it
    assert [p.name for p in (served / "rollout-adapters").iterdir()] == [f"{run}-policy-step-2"]
    assert listed(served_warm_start) == ["warm-start", f"{run}-policy-step-2"]

    # a later attempt of the run (here: resumed to a third step) first unloads what the earlier one left loaded
    train(lora_config() | {"rollout_server": served_warm_start + "/v1", "steps": 3}, served, resume=True)
    assert listed(served_warm_start) == ["warm-start", f"{run}-policy-step-3"]
    assert [p.name for p in (served / "rollout-adapters").iterdir()] == [f"{run}-policy-step-3"]


def listed(url: str) -> list[str]:
    return [m["id"] for m in requests.get(url + "/v1/models", timeout=10).json()["data"]]


def test_two_processes_sample_their_shares_from_the_one_synced_adapter(tmp_path, tiny_llama):
    from test_training_processes import launch

    knobs = {"prompts_per_step": 2, "lora": LORA}
    launch("processes_train.py", 2, str(tiny_llama), str(tmp_path / "local"), json.dumps(knobs))
    with cli_server(["serve-model", "--ckpt", str(tiny_llama), "--name", "tiny", "--adapters", str(tmp_path)]) as url:
        launch("processes_train.py", 2, str(tiny_llama), str(tmp_path / "served"), json.dumps(knobs | {"rollout_server": url}))
    for step in (1, 2):
        assert rows(tmp_path / "served", f"rollouts/step-{step}.jsonl") == rows(tmp_path / "local", f"rollouts/step-{step}.jsonl")


def test_serve_model_loads_and_unloads_adapters_and_keeps_serving_the_model_without_them(tmp_path, served_warm_start):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from cfbench.harness.checkpoints import load_model, resolve

    base = resolve("smollm2-135m-search").location
    model = get_peft_model(load_model(AutoModelForCausalLM, base, torch.float32), LoraConfig(**{"r": 4, "target_modules": ["q_proj"]}))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.5)  # a visible adapter
    model.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)

    def complete(model_name):
        body = {"model": model_name, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "logprobs": 0}
        return requests.post(served_warm_start + "/v1/completions", json=body, timeout=120)

    def answer(model_name):
        [choice] = complete(model_name).json()["choices"]
        return choice["text"], choice["logprobs"]["token_logprobs"]

    def route(name, body):
        return requests.post(f"{served_warm_start}/v1/{name}", json=body, timeout=120)

    plain = answer("warm-start")
    assert route("load_lora_adapter", {"lora_name": "visible", "lora_path": str(tmp_path / "adapter")}).status_code == 200
    assert answer("visible") != plain and answer("warm-start") == plain  # the model's own name: bit for bit as before

    again = route("load_lora_adapter", {"lora_name": "visible", "lora_path": str(tmp_path / "adapter")})
    assert again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]
    empty = route("load_lora_adapter", {"lora_name": "other", "lora_path": str(tmp_path)})
    assert empty.status_code == 400 and "holds no adapter_config.json" in empty.json()["error"]["message"]
    assert route("unload_lora_adapter", {"lora_name": "visible"}).status_code == 200
    assert route("unload_lora_adapter", {"lora_name": "visible"}).status_code == 404
    gone = complete("visible")
    assert gone.status_code == 404 and "'warm-start'" in gone.json()["error"]["message"]
    assert answer("warm-start") == plain

    # another adapter after the last one went: the model's own name still serves the model alone
    assert route("load_lora_adapter", {"lora_name": "again", "lora_path": str(tmp_path / "adapter")}).status_code == 200
    assert answer("warm-start") == plain and answer("again") != plain
    assert route("unload_lora_adapter", {"lora_name": "again"}).status_code == 200

    # an adapter made for another shape is refused before it touches the served model
    from transformers import LlamaConfig, LlamaForCausalLM

    small = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, vocab_size=512)
    get_peft_model(LlamaForCausalLM(small), LoraConfig(r=4, target_modules=["q_proj"])).save_pretrained(tmp_path / "other")
    wrong = route("load_lora_adapter", {"lora_name": "wrong", "lora_path": str(tmp_path / "other")})
    assert wrong.status_code == 400 and "does not fit this model" in wrong.json()["error"]["message"]
    assert answer("warm-start") == plain and "wrong" not in listed(served_warm_start)


def test_a_rollout_server_needs_lora_and_a_server_that_answers(tmp_path):
    with pytest.raises(CfbenchError, match="knob rollout_server: only LoRA adapters are synced"):
        load_config("search-r1", "cpu-smoke", 1, 1) | {"rollout_server": "http://127.0.0.1:1/v1"}
    down = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(CfbenchError, match=r"rollout server .*/v1/models: ConnectError.*is it running"):
        train(lora_config() | {"rollout_server": down}, tmp_path / "run")
