"""Tolerances for float32 training results computed in another reduction order (other process count, sharding,
gradient checkpointing, chunked log-probs): what the dtype and the order allow, never a bare constant.

A float32 sum of n terms taken in two orders differs by at most about 2(n-1)·u·sum|term| (u = 2^-24, the unit
roundoff: the classic recursive-summation bound). An element's gradient sums one term per trained token of the batch;
the largest |gradient| of its tensor stands for the size of one term (an estimate: terms of opposite sign cancel).
"""

import torch

U = 2.0**-24  # float32 unit roundoff: half of torch.finfo(torch.float32).eps


def gradient_error(gradient: torch.Tensor, terms: int) -> float:
    """How far another reduction order may move an element of this tensor's gradient (see the module docstring)."""
    return 2 * (terms - 1) * U * float(gradient.abs().max())


def adamw_first_step_tolerance(weights: torch.Tensor, gradient: torch.Tensor, lr: float, terms: int, eps: float = 1e-8) -> torch.Tensor:
    """Per element, how far two first AdamW steps (no weight decay) from the same weights may land apart when their
    gradients were summed in different orders.

    AdamW's first step moves a weight by lr·g/(|g|+eps) (the bias-corrected m/(sqrt(v)+eps)). Its derivative in g is
    lr·eps/(|g|+eps)^2, so a gradient error dg moves the weight by at most that times dg, and never by more than 2·lr
    (the step's whole range: a gradient within rounding of zero may change sign). The step's own float32 operations
    (two moments, square root, division, scaling by lr, subtraction from the weight) each round once, on values of at
    most |w| + lr: 8 unit roundoffs of that for each of the two results covers them.
    """
    moved = lr * eps * gradient_error(gradient, terms) / (gradient.abs() + eps) ** 2
    return moved.clamp(max=2 * lr) + 2 * 8 * U * (weights.abs() + lr)


def assert_adamw_first_steps_agree(got: dict, want: dict, gradients: dict, lr: float, terms: int, label: str = "") -> None:
    """Every weight within its tolerance: rounding-level (about 1e-11 here) where the gradient stands clear of the
    reduction error, up to the step's range only where it does not."""
    for name, gradient in gradients.items():
        tolerance = adamw_first_step_tolerance(want[name], gradient, lr, terms)
        apart = (got[name] - want[name]).abs()
        assert (apart <= tolerance).all(), f"{label} {name}: {int((apart > tolerance).sum())} weights beyond the tolerance"


def first_gradients(optimizer, model) -> dict:
    """Each parameter's gradient in the first AdamW step, from its first moment m = (1 - beta1)·g, by parameter name."""
    optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper, or AdamW itself
    beta1 = optimizer.param_groups[0]["betas"][0]
    return {name: optimizer.state[p]["exp_avg"] / (1 - beta1) for name, p in model.named_parameters() if p in optimizer.state}
