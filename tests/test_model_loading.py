"""Every model cfbench loads goes through checkpoints.load_model: never with the hub's kernels."""

import os

import torch
from transformers import AutoModelForCausalLM

from cfbench.harness.checkpoints import load_model


def test_models_load_without_hub_kernels(tiny_llama):
    # transformers' own default turns hub kernels on (its `kernels` dependency is installed); on CUDA,
    # train() would then fetch kernels from the hub.
    if os.environ.get("USE_HUB_KERNELS", "YES").upper() in ("YES", "1", "TRUE", "ON"):  # unless the environment turns them off
        assert AutoModelForCausalLM.from_pretrained(tiny_llama).use_kernels
    model = load_model(AutoModelForCausalLM, tiny_llama, torch.float32)
    model.train()
    assert not model.use_kernels and model.kernels_mode is None
    assert model.dtype == torch.float32
