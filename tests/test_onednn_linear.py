"""`--linear onednn`: packed oneDNN linear layers compute what nn.Linear computes (up to float rounding), replace
every linear layer of the hf engine's model, are recorded in the run record, and a resume across the two settings
is refused. Speed is measured by benchmarks/engines.py, not here."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from cfbench.harness.backends.choose import backend_for
from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.backends.onednn import PackedLinear, use_linear
from cfbench.harness.checkpoints import resolve
from cfbench.harness.errors import CfbenchError
from cfbench.harness.runrecord import RunDir
from tolerances import U


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 96), (16, 96), (3, 7, 96), (160, 96)])
@torch.inference_mode()
def test_a_packed_linear_computes_what_the_linear_computes(bias, shape):
    torch.manual_seed(0)
    linear = nn.Linear(96, 40, bias=bias)
    x = torch.randn(*shape)
    got, expected = PackedLinear(linear)(x), linear(x)
    assert got.shape == expected.shape
    # oneDNN and torch sum each output's 96 products (and the bias) in their own orders: two float32 sums of K terms
    # differ by at most 2·K·u·sum|term| (tests/tolerances.py), element by element
    terms = x.abs() @ linear.weight.abs().T + (linear.bias.abs() if bias else 0)
    assert ((got - expected).abs() <= 2 * (96 + 1) * U * terms).all()


@torch.inference_mode()
def test_the_onednn_engine_packs_every_linear_layer_and_gives_the_same_logits(tiny_llama):
    ckpt = resolve(str(tiny_llama))
    plain, packed = HFBackend.load(ckpt), HFBackend.load(ckpt, linear="onednn")
    assert not any(isinstance(m, nn.Linear) for m in packed.model.modules())
    assert sum(isinstance(m, PackedLinear) for m in packed.model.modules()) == 2 * 7 + 1  # 7 a layer, and the head
    ids = torch.tensor([[5, 17, 230, 9, 44, 8, 71, 3]])
    assert torch.allclose(packed.model(input_ids=ids).logits, plain.model(input_ids=ids).logits, atol=1e-4)
    prompts = [[5, 17, 230, 9, 44, 8], [71, 3], [900, 12, 13, 14]]
    assert all(len(c.ids) == 12 for c in packed.complete(prompts, 12, ()))  # decodes a shrinking batch through the packed layers


def test_the_setting_is_in_the_run_record_and_a_resume_across_settings_is_refused(tiny_llama, tmp_path):
    ckpt = resolve(str(tiny_llama))
    plain, packed = HFBackend.load(ckpt), HFBackend.load(ckpt, linear="onednn")
    assert "linear" not in plain.describe()  # records made before the option resume unchanged
    assert packed.describe()["linear"] == "onednn"
    first = RunDir(tmp_path / "run")
    first.open({"model": plain.describe()}, resume=False)
    first.close()  # its writer ended: a resume is then judged on its settings, not refused for the lock
    with pytest.raises(CfbenchError, match="cannot resume, the settings differ \\(model.linear: run has None, now 'onednn'\\)"):
        RunDir(tmp_path / "run").open({"model": packed.describe()}, resume=True)


def _mapped(path) -> bool:
    return any(line.rstrip().endswith(str(path)) for line in open("/proc/self/maps"))


def test_the_packed_engine_lets_go_of_the_checkpoints_memory_map(tiny_llama):
    # transformers maps the safetensors file and packing reads every page of it: while any tensor still points
    # into the map those pages stay resident beside the packed copies (+0.5 GB for SmolLM2-135M).
    weights = (tiny_llama / "model.safetensors").resolve()
    plain = HFBackend.load(resolve(str(tiny_llama)))
    assert _mapped(weights)  # the premise: torch's engine keeps reading its weights through the map
    del plain
    gc.collect()
    packed = HFBackend.load(resolve(str(tiny_llama)), linear="onednn")
    assert not _mapped(weights)
    ids = torch.tensor([[5, 17, 230, 9]])
    assert packed.model(input_ids=ids).logits.isfinite().all()


def test_onednn_is_refused_where_it_cannot_run(tiny_llama):
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(CfbenchError, match="--linear onednn runs on --device cpu"):
        use_linear(model, "onednn", "cuda")
    with pytest.raises(CfbenchError, match="unknown --linear 'mkl'"):
        use_linear(model, "mkl", "cpu")
    assert isinstance(model[0], nn.Linear)  # refused before anything was swapped
    with pytest.raises(CfbenchError, match="--linear onednn is for --backend hf"):
        backend_for("vllm", ckpt=str(tiny_llama), linear="onednn")
    with pytest.raises(CfbenchError, match="--linear onednn is for --backend hf"):
        backend_for("openai", ckpt=None, linear="onednn", base_url="http://127.0.0.1:1/v1", model="m")
