"""The section-5 objective, advantages, rewards and episode masks, against hand-computed values."""

import math
from types import SimpleNamespace

import pytest
import torch

from cfbench.harness.backends.tokens import PromptTokens
from cfbench.training.core.episodes import collate, encode_episode
from cfbench.training.core.objective import group_advantages, recipe_loss, token_logprobs
from cfbench.training.core.rewards import reward


def test_loss_equals_the_hand_computed_value():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -4.0], [-0.2, -0.1, -0.3]], dtype=torch.float64)
    trained = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 1, 1]])
    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.5]), [0, 0, 1])
    # group 0: mean .5, sample std sqrt(.5); group 1 has one episode: no baseline, advantage 0
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert advantages.tolist() == pytest.approx([a, -a, 0.0], abs=1e-7)
    expected = -(a * (-1.0 - 2.0) / 2 + (-a) * (-0.5 - 4.0) / 2 + 0.0) / 3
    assert recipe_loss(logprobs, trained, advantages.double()).item() == pytest.approx(expected, abs=1e-6)
    # split into micro-batches with episodes=|E|, the parts sum to the whole
    parts = sum(recipe_loss(logprobs[i : i + 1], trained[i : i + 1], advantages[i : i + 1].double(), episodes=3).item() for i in range(3))
    assert parts == pytest.approx(expected, abs=1e-6)


def test_equal_rewards_give_no_advantage():
    assert group_advantages(torch.tensor([0.2, 0.2, 0.2, 1.0, 1.0]), [0, 0, 0, 1, 1]).tolist() == [0.0] * 5


def test_masked_positions_receive_zero_gradient():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 11, requires_grad=True)
    model = lambda input_ids, attention_mask: SimpleNamespace(logits=logits)  # noqa: E731 - the logits are the leaf under test
    ids = torch.randint(0, 11, (2, 6))
    trained = torch.tensor([[0, 0, 1, 1, 0], [1, 0, 0, 1, 1]])
    loss = recipe_loss(token_logprobs(model, ids, torch.ones_like(ids)), trained, torch.tensor([0.7, -1.3]))
    loss.backward()
    per_position = logits.grad[:, :-1].abs().sum(-1)  # position t-1 predicts target t
    assert torch.all(per_position[trained == 0] == 0)
    assert torch.all(per_position[trained == 1] > 0)
    assert torch.all(logits.grad[:, -1] == 0)  # the last position predicts nothing


@pytest.mark.parametrize(
    "prediction, turns, em, shaped",
    [
        ("Paris", [{"action": "answer"}], 1.0, 1.0),
        ("Paris", [{"action": "invalid"}, {"action": "answer"}], 1.0, 0.8),
        ("Lyon", [{"action": "search"}, {"action": "answer"}], 0.0, 0.2),
        ("", [{"action": "search"}, {"action": "search_over_budget"}], 0.0, 0.2),
        ("Lyon", [{"action": "invalid"}, {"action": "answer"}], 0.0, 0.1),
        ("", [{"action": "invalid"}, {"action": "invalid"}], 0.0, 0.0),
    ],
)
def test_reward_table(prediction, turns, em, shaped):
    assert reward("em", prediction, ["Paris", "City of Light"], turns) == em
    assert reward("em+format", prediction, ["Paris", "City of Light"], turns) == pytest.approx(shaped)


@pytest.mark.slow
def test_episode_mask_covers_exactly_the_model_text(smollm2):
    tokens: PromptTokens = smollm2.tokens
    turns = [
        {
            "generated": "<search> capital of France </search>",
            "observation": "\n\n<information>Doc 1(Title: Paris) Paris is the capital.</information>\n\n",
        },
        {"generated": " I think <answer> Paris </answer>"},
    ]
    prompt = tokens.chat_prompt("Question: capital of France?")
    episode = encode_episode(tokens, prompt, turns, 1.0, 0)
    own = [t for t, m in zip(episode.ids, episode.trained) if m]
    read = [t for t, m in zip(episode.ids, episode.trained) if not m]
    assert tokens.decode(own) == turns[0]["generated"] + turns[1]["generated"]
    assert tokens.decode(read) == tokens.decode(tokens.encode(prompt)) + turns[0]["observation"]
    ids, attention, trained = collate([episode, encode_episode(tokens, prompt, turns[:1], 0.0, 0)], pad_id=0)
    assert ids.shape == attention.shape and trained.shape == (2, ids.shape[1] - 1)
    assert attention[1].sum() < attention[0].sum() and trained[1].sum() == len(
        tokens.tokenizer(turns[0]["generated"], add_special_tokens=False)["input_ids"]
    )
