"""The learner's update with the config's recipe terms, on a real (tiny, random) Llama: KL to the frozen
reference, N clipped updates per batch, and the warmup schedule, against values computed here by hand."""

import copy
import math

import pytest
import torch
from accelerate import Accelerator

from cfbench.harness.errors import CfbenchError
from cfbench.training.core.episodes import Episode, collate
from cfbench.training.core.learner import learner
from cfbench.training.core.objective import group_advantages, groups_with_signal, token_logprobs
from cfbench.training.core.policy_update import mini_batches, reference_model, update
from cfbench.training.treatments import load_config
from tolerances import assert_adamw_first_steps_agree, first_gradients

# two groups of two episodes: unequal rewards in each, so every advantage is +-0.707
EPISODES = [
    Episode(list(range(10 + 3 * k, 26 + 3 * k)), [0] * 6 + [1] * 10, reward, k // 2) for k, reward in enumerate([1.0, 0.0, 0.0, 1.0])
]


def config(**objective):
    return load_config("search-r1", "cpu-smoke") | {"objective": objective, "prompts_per_step": 2, "micro_batch": 3}


def adam_steps(role) -> int:
    return int(next(iter(role.optimizer.state_dict()["state"].values()))["step"])


def test_defaults_are_one_plain_step_and_record_no_recipe_terms(tiny_llama):
    accelerator = Accelerator(cpu=True)
    role = learner(config(), tiny_llama, accelerator, 10)
    assert reference_model(config(), tiny_llama, accelerator) is None  # kl_coef 0: no reference is built
    ids, attention, trained = collate(EPISODES, 0)
    with torch.no_grad():
        logp = token_logprobs(role.model, ids, attention).double()
    a = group_advantages(torch.tensor([e.reward for e in EPISODES]), [e.group for e in EPISODES]).double()
    hand = sum(-a[i] * (logp[i] * trained[i]).sum() / trained[i].sum() for i in range(4)) / 4
    stats = update(role, accelerator, EPISODES, config(), 0)
    assert stats.loss == pytest.approx(hand.item(), abs=1e-5)
    assert adam_steps(role) == 1 and set(stats.metrics()) == {"loss", "grad_norm", "groups_with_signal", "optimizer_step"}
    assert stats.groups_with_signal == 1.0 and stats.optimizer_step


def test_groups_with_signal_counts_groups_whose_rewards_differ():
    assert groups_with_signal([1.0, 0.0, 0.0, 0.0, 0.3, 0.3], [0, 0, 1, 1, 2, 2]) == pytest.approx(1 / 3)
    assert groups_with_signal([1.0], [0]) == 0.0 and groups_with_signal([], []) == 0.0


def test_a_group_of_equal_rewards_has_advantage_exactly_zero():
    rewards = torch.tensor([0.1 + 0.2] * 5 + [0.3, 0.7])  # 0.1 + 0.2 rounds: a mean of them need not equal them
    advantages = group_advantages(rewards, [0] * 5 + [1, 1])
    assert advantages[:5].tolist() == [0.0] * 5 and advantages[5] < 0 < advantages[6]


def test_a_step_with_every_advantage_zero_leaves_weights_and_optimizer_state_unchanged(tiny_llama):
    accelerator = Accelerator(cpu=True)
    cfg = config() | {"skip_empty_updates": True}
    role = learner(cfg, tiny_llama, accelerator, 10)
    assert update(role, accelerator, EPISODES, cfg, 0).optimizer_step  # a real step first: AdamW's moments are now non-zero
    empty = [Episode(e.ids, e.trained, reward, e.group) for e, reward in zip(EPISODES, [1.0, 1.0, 0.0, 0.0])]  # equal within groups
    weights = {k: v.clone() for k, v in role.model.state_dict().items()}
    moments, schedule = copy.deepcopy(role.optimizer.state_dict()), copy.deepcopy(role.scheduler.state_dict())
    stats = update(role, accelerator, empty, cfg, 0)
    assert not stats.optimizer_step and stats.groups_with_signal == 0.0 and stats.loss == 0.0
    assert all(torch.equal(weights[k], v) for k, v in role.model.state_dict().items())
    after = role.optimizer.state_dict()
    assert after["param_groups"] == moments["param_groups"] and role.scheduler.state_dict() == schedule
    for key, state in moments["state"].items():
        assert all(torch.equal(value, after["state"][key][name]) for name, value in state.items())
    # without the knob the same step moves the weights through AdamW's first moment and counts a step
    assert update(role, accelerator, empty, config(), 0).optimizer_step and adam_steps(role) == 2
    assert not all(torch.equal(weights[k], v) for k, v in role.model.state_dict().items())


def test_skipping_empty_updates_is_refused_with_a_kl_term():
    with pytest.raises(CfbenchError, match="knob skip_empty_updates: with objective.kl_coef 0.001"):
        config(kl_coef=0.001) | {"skip_empty_updates": True}


def test_the_kl_term_is_the_hand_computed_k3_to_the_reference(tiny_llama):
    from transformers import AutoModelForCausalLM

    accelerator = Accelerator(cpu=True)
    cfg = config(kl_coef=0.5, kl_type="low_var_kl")
    role = learner(cfg, tiny_llama, accelerator, 10)
    reference = reference_model(cfg, tiny_llama, accelerator)
    assert not reference.training and not any(p.requires_grad for p in reference.parameters())
    with torch.no_grad():  # a reference the policy has moved away from (the starting one is at KL 0)
        for p in reference.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(p.numel())))
    kept = [p.clone() for p in reference.parameters()]
    ids, attention, trained = collate(EPISODES, 0)
    with torch.no_grad():
        logp = token_logprobs(role.model, ids, attention).double()
        ref = token_logprobs(reference, ids, attention).double()
        fresh = AutoModelForCausalLM.from_pretrained(tiny_llama)
        assert not torch.allclose(token_logprobs(fresh, ids, attention).double(), ref)  # the perturbation moved it
    a = [1 / math.sqrt(2) / (1 + 1e-6 * math.sqrt(2))] * 4
    a = [a[0], -a[0], -a[0], a[0]]
    policy, kl, tokens, total_kl = 0.0, 0.0, 0, 0.0
    for i in range(4):
        mask = trained[i].bool()
        d = (ref[i] - logp[i])[mask].tolist()  # k3 = e^d - d - 1, d = log pi_ref - log pi, per token
        k3 = [math.exp(x) - x - 1 for x in d]
        policy += -a[i] * sum(logp[i][mask].tolist()) / len(d)
        kl += sum(k3) / len(d)
        total_kl, tokens = total_kl + sum(k3), tokens + len(d)
    stats = update(role, accelerator, EPISODES, cfg, 0, reference)
    assert kl > 0.01
    assert stats.loss == pytest.approx((policy + 0.5 * kl) / 4, abs=1e-5)
    assert stats.kl == pytest.approx(total_kl / tokens, rel=1e-4)
    assert all(torch.equal(a, b) for a, b in zip(kept, reference.parameters()))  # frozen: the update left it as it was


def test_two_updates_per_batch_take_two_optimizer_steps_and_the_second_is_off_policy(tiny_llama):
    accelerator = Accelerator(cpu=True)
    cfg = config(updates_per_batch=2, clip_eps=0.2) | {"learning_rate": 0.01}
    role = learner(cfg, tiny_llama, accelerator, 10)
    before = [p.clone() for p in role.model.parameters()]
    stats = update(role, accelerator, EPISODES, cfg, 0)
    assert adam_steps(role) == 2 and role.scheduler.scheduler.last_epoch == 1  # two optimizer steps, one schedule step per batch
    assert stats.ratio != pytest.approx(1.0, abs=1e-6)  # the second mini-batch is scored by the once-updated policy
    assert 0 <= stats.clipped <= 1 and {"ratio", "clipped"} <= set(stats.metrics())
    assert any(not torch.equal(a, b) for a, b in zip(before, role.model.parameters()))
    assert [list(r) for r in mini_batches(4, 2)] == [[0, 1], [2, 3]] and [len(r) for r in mini_batches(5, 2)] == [2, 3]
    assert mini_batches(1, 2) == [range(0, 1)]  # a part left empty takes no step


def test_warmup_ratio_is_a_share_of_each_roles_updates(tiny_llama):
    accelerator = Accelerator(cpu=True)
    cfg = config() | {"warmup_steps": 0, "warmup_ratio": 0.3}
    role = learner(cfg, tiny_llama, accelerator, 10)  # int(0.3 x 10) = 3 warmup steps, linear from 0
    lrs = []
    for _ in range(5):
        lrs.append(role.scheduler.get_last_lr()[0])
        role.optimizer.step()
        role.scheduler.step()
    assert lrs == pytest.approx([0.0, 5e-05 / 3, 2 * 5e-05 / 3, 5e-05, 5e-05])
    paper = load_config("dr-zero", "paper")  # Dr. Zero: 3% of 54 proposer and 75 solver updates, rounded down as verl does
    assert (paper.warmup(paper.updates_of("proposer")), paper.warmup(paper.updates_of("main"))) == (1, 2)
    assert load_config("search-r1", "paper").warmup(1005) == 286  # warmup_steps given: the ratio is not used


def test_gradient_checkpointing_and_chunked_log_probs_change_memory_not_the_update(tiny_llama):
    """The paper configs' memory knobs: the same log-probs (values and gradients) and the same step as the plain update."""
    accelerator = Accelerator(cpu=True)
    lean_config = config() | {"gradient_checkpointing": True, "logprob_chunk": 4}  # 15 target positions: chunks of 4, 4, 4, 3
    plain, lean = learner(config(), tiny_llama, accelerator, 10), learner(lean_config, tiny_llama, accelerator, 10)
    assert lean.model.is_activation_checkpointing and not plain.model.is_activation_checkpointing
    ids, attention, _ = collate(EPISODES, 0)
    whole = token_logprobs(plain.model, ids, attention, 0.7)
    chunked = token_logprobs(lean.model, ids, attention, 0.7, chunk=4)
    assert torch.allclose(whole, chunked, atol=1e-5)
    whole.sum().backward()
    chunked.sum().backward()
    for a, b in zip(plain.model.parameters(), lean.model.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-5)
    plain.optimizer.zero_grad()
    lean.optimizer.zero_grad()
    one, other = update(plain, accelerator, EPISODES, config(), 0), update(lean, accelerator, EPISODES, lean_config, 0)
    assert other.loss == pytest.approx(one.loss, abs=1e-5) and other.grad_norm == pytest.approx(one.grad_norm, rel=1e-4)
    # recomputed activations and chunked log-probs sum the same float32 terms in another order (tests/tolerances.py)
    weights = [{n: p.detach() for n, p in role.model.named_parameters()} for role in (lean, plain)]
    gradients = first_gradients(plain.optimizer, plain.model)
    assert_adamw_first_steps_agree(*weights, gradients, config().learning_rate, sum(len(e.ids) for e in EPISODES))


def test_skipping_micro_batches_without_advantage_takes_the_same_step_bit_for_bit(tiny_llama):
    """skip_empty_updates also leaves out the passes of micro-batches whose advantages are all zero: their gradient is
    exactly zero, so the step is the same to the bit, and the loss still averages over all the step's episodes."""
    rewards = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]  # group 1 (episodes 2, 3) has no signal
    episodes = [Episode(list(range(10 + 3 * k, 26 + 3 * k)), [0] * 6 + [1] * 10, r, k // 2) for k, r in enumerate(rewards)]
    accelerator = Accelerator(cpu=True)
    runs = {}
    for skip in (False, True):
        cfg = config() | {"skip_empty_updates": skip, "micro_batch": 1, "prompts_per_step": 3}
        role = learner(cfg, tiny_llama, accelerator, 10)
        rows: list[int] = []

        def count(module, args, kwargs, out, rows=rows):
            rows.append(kwargs["input_ids"].shape[0])

        hook = role.model.register_forward_hook(count, with_kwargs=True)
        stats = update(role, accelerator, episodes, cfg, 0)
        hook.remove()
        runs[skip] = stats, rows, {n: p.detach().clone() for n, p in role.model.named_parameters()}
    (full, full_rows, before), (lean, lean_rows, after) = runs[False], runs[True]
    assert sum(full_rows) == 6 and sum(lean_rows) == 4  # the two episodes of the group without signal were not run
    assert lean.grad_norm == full.grad_norm and lean.loss == pytest.approx(full.loss, abs=1e-7)
    assert before.keys() == after.keys() and all(torch.equal(before[n], after[n]) for n in before)
    # with dropout every pass runs: one left out would move the random stream, and so the masks of the passes after it
    lora = {"r": 2, "alpha": 4, "dropout": 0.1, "target_modules": ["q_proj"]}
    cfg = config() | {"skip_empty_updates": True, "micro_batch": 1, "prompts_per_step": 3, "lora": lora}
    role, rows = learner(cfg, tiny_llama, accelerator, 10), []
    hook = role.model.register_forward_hook(lambda module, args, kwargs, out: rows.append(1), with_kwargs=True)
    update(role, accelerator, episodes, cfg, 0)
    hook.remove()
    assert len(rows) == 6
