"""Search-R1's recipe terms (KL to a frozen reference, clipped ratio) against values worked out by hand on a toy batch."""

import math

import pytest
import torch

from cfbench.training.core.objective import clipped_surrogate, kl_per_token, recipe_loss

# two episodes x three target positions; the third target of episode 0 is not the model's text
LOGP = torch.tensor([[-1.0, -0.5, -2.0], [-0.2, -1.5, -0.7]], dtype=torch.float64)
OLD = torch.tensor([[-1.2, -0.5, -1.0], [-0.2, -1.0, -0.7]], dtype=torch.float64)
REF = torch.tensor([[-1.0, -0.7, -1.5], [-0.4, -1.5, -0.2]], dtype=torch.float64)
TRAINED = torch.tensor([[1, 1, 0], [1, 1, 1]])
ADV = torch.tensor([1.0, -0.5], dtype=torch.float64)


def test_kl_estimators_match_hand_values():
    # k1 = logp - ref
    torch.testing.assert_close(kl_per_token(LOGP, REF, "kl"), torch.tensor([[0.0, 0.2, -0.5], [0.2, 0.0, -0.5]], dtype=torch.float64))
    # k3 = exp(d) - d - 1 with d = ref - logp: d = 0 -> 0; d = -0.2 -> e^-0.2 - 0.8; d = 0.5 -> e^0.5 - 1.5
    k3 = [[0.0, math.exp(-0.2) - 0.8, math.exp(0.5) - 1.5], [math.exp(-0.2) - 0.8, 0.0, math.exp(0.5) - 1.5]]
    torch.testing.assert_close(kl_per_token(LOGP, REF, "low_var_kl"), torch.tensor(k3, dtype=torch.float64))
    # verl's clamp: a token the policy moved 30 nats from the reference counts 10, not e^30
    assert kl_per_token(torch.tensor([-31.0]), torch.tensor([-1.0]), "low_var_kl").item() == 10.0
    with pytest.raises(ValueError, match="kl type"):
        kl_per_token(LOGP, REF, "k2")


def test_clipped_surrogate_matches_hand_values():
    # episode 0, A = 1: r = e^0.2 = 1.221 -> clipped to 1.2, loss -1.2; r = 1 -> -1; (masked third) mean -1.1
    # episode 1, A = -0.5: r = 1 -> 0.5; r = e^-0.5 = 0.607 -> min(-0.303, 0.8 x -0.5 = -0.4) = -0.4, loss 0.4; r = 1 -> 0.5
    per_token = clipped_surrogate(LOGP, OLD, ADV, 0.2)
    assert per_token[0, :2].tolist() == pytest.approx([-1.2, -1.0])
    assert per_token[1].tolist() == pytest.approx([0.5, 0.4, 0.5])
    clipped = (-1.1 + (0.5 + 0.4 + 0.5) / 3) / 2
    assert recipe_loss(LOGP, TRAINED, ADV, old_logprobs=OLD, clip_eps=0.2).item() == pytest.approx(clipped)
    # + 0.1 x k3: episode 0 mean (0 + e^-0.2 - 0.8) / 2, episode 1 mean (e^-0.2 - 0.8 + 0 + e^0.5 - 1.5) / 3, over 2 episodes
    kl = ((math.exp(-0.2) - 0.8) / 2 + (math.exp(-0.2) - 0.8 + math.exp(0.5) - 1.5) / 3) / 2
    total = recipe_loss(LOGP, TRAINED, ADV, old_logprobs=OLD, clip_eps=0.2, ref_logprobs=REF, kl_type="low_var_kl", kl_coef=0.1)
    assert total.item() == pytest.approx(clipped + 0.1 * kl)
    # micro-batches with episodes=|E| sum to the whole, as the plain objective's do
    parts = sum(
        recipe_loss(
            LOGP[i : i + 1],
            TRAINED[i : i + 1],
            ADV[i : i + 1],
            episodes=2,
            old_logprobs=OLD[i : i + 1],
            ref_logprobs=REF[i : i + 1],
            kl_coef=0.1,
        ).item()
        for i in range(2)
    )
    assert parts == pytest.approx(total.item())


def test_clipped_tokens_get_no_gradient_and_the_first_update_is_the_plain_objective():
    logp = LOGP.clone().requires_grad_(True)
    recipe_loss(logp, TRAINED, ADV, old_logprobs=OLD, clip_eps=0.2).backward()
    assert logp.grad[0, 0] == 0  # A > 0 and r above 1 + eps: clipped, no push further
    assert logp.grad[1, 1] == 0  # A < 0 and r below 1 - eps: clipped
    assert logp.grad[1, 0] != 0 and logp.grad[0, 2] == 0  # inside the range; masked target
    # first of N updates: pi_old = pi, so r = 1 and the gradient is the unclipped objective's
    a, b = LOGP.clone().requires_grad_(True), LOGP.clone().requires_grad_(True)
    recipe_loss(a, TRAINED, ADV, old_logprobs=a.detach(), clip_eps=0.2).backward()
    recipe_loss(b, TRAINED, ADV).backward()
    assert torch.allclose(a.grad, b.grad)


def test_kl_needs_the_reference():
    with pytest.raises(ValueError, match="ref_logprobs"):
        recipe_loss(LOGP, TRAINED, ADV, kl_coef=0.001)
