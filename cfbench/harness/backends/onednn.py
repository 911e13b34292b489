"""`--linear onednn`: the hf engine's linear layers on oneDNN, each weight packed once at load.

Decoding multiplies a handful of rows (the live trajectories) by every weight matrix at every token.
For that shape torch's float32 linear (MKL, which repacks the weight on each call) is slower than
oneDNN's kernel on a weight packed in advance, the kernel CTranslate2 runs on this CPU: on 2 cores,
16 rows x SmolLM2's 576 -> 1536 projection took 370 us with MKL and 226 us packed (1.6x; prompt-sized
batches of 160 rows are equal), and `benchmarks/engines.py` measures the whole engine. The sums are
ordered differently, so logits differ in the last bits (about 1e-4 on logits near 20) and a near-tie
can pick another token: a run records `"linear": "onednn"` in its engine description, and a resume
with the other setting is refused like any other engine change.

Hand-written because nothing packaged does it for a transformers model on a stock torch wheel: torch
exposes the packed op (its Inductor CPU backend calls it from compiled graphs) but no module, and
Intel Extension for PyTorch's `ipex.optimize`, which did this, has been discontinued.
"""

from __future__ import annotations

import torch
from torch import nn

from cfbench.harness.errors import CfbenchError

LINEARS = ("torch", "onednn")
BATCH_HINT = 16  # rows oneDNN lays the packed weight out for: the evaluation's default batch


class PackedLinear(nn.Module):
    """A frozen nn.Linear whose weight oneDNN packed once; inference only (no gradient flows)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.out_features = linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), BATCH_HINT)
        self.bias = None if linear.bias is None else linear.bias.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), self.packed, self.bias, "none", [], "")
        return flat.reshape(*x.shape[:-1], self.out_features)


def use_linear(model: nn.Module, linear: str, device: str) -> None:
    """Swap every nn.Linear of `model` for a PackedLinear when `linear` is "onednn"; "torch" keeps them."""
    if linear not in LINEARS:
        raise CfbenchError(f"unknown --linear {linear!r}; choose one of {', '.join(LINEARS)}")
    if linear == "torch":
        return
    if device != "cpu" or not torch.backends.mkldnn.is_available():
        raise CfbenchError(f"--linear onednn runs on --device cpu with a torch built with oneDNN (got device {device!r}); drop it")
    parents = [m for m in model.modules() if not isinstance(m, nn.Linear)]  # holding a linear here would keep its weight alive
    for module in parents:
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, PackedLinear(child))
    # Packing read every weight through transformers' memory map of the checkpoint, and all those pages stay
    # resident while any tensor still points into the map (measured: +0.5 GB of RSS for SmolLM2-135M). The packed
    # copies replace the linears; copying the few tensors left (embeddings, norms) out lets the map go.
    for tensor in [*model.parameters(), *model.buffers()]:
        tensor.data = tensor.data.clone()
