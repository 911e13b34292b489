"""Training rollouts through the one engine interface: the in-process hf engine and a served model
(`cfbench serve-model` on loopback, through the OpenAI-compatible client) sample the same trajectories,
and the update trains on the token ids the engine sampled, never on a re-encoding of their text.

The model is a real (tiny, random) Llama: at temperature 1 it samples token sequences that its own
text does not re-encode to, which is exactly the case the sampled ids exist for.
"""

import math

import pytest
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

from cfbench.harness.agent import run_batch
from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.backends.openai import OpenAIBackend
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.checkpoints import resolve
from cfbench.harness.protocol import Knobs, user_prompt
from cfbench.harness.suite import load_suite
from cfbench.training.core.episodes import encode_episode, rollout_episode
from cfbench.training.core.learner import learner
from cfbench.training.core.policy_update import update
from cfbench.training.treatments import load_config
from servers import cli_server

pytestmark = pytest.mark.slow  # serves a model in a subprocess and trains a step

KNOBS = Knobs(max_new_tokens=16, max_searches=2)


def sampler(tiny_llama, seed: int, temperature: float = 1.0) -> HFBackend:
    from transformers import AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    tokens = PromptTokens(AutoTokenizer.from_pretrained(tiny_llama))
    return HFBackend(model, tokens, ckpt=resolve(str(tiny_llama)), dtype="float32", temperature=temperature, seed=seed)


@pytest.fixture(scope="module")
def questions():
    return load_suite("mini").questions[:6]


@pytest.fixture(scope="module")
def served_tiny(tiny_llama):
    with cli_server(["serve-model", "--ckpt", str(tiny_llama), "--name", "tiny"]) as url:
        yield url + "/v1"


def test_hf_and_a_served_model_sample_the_same_rollouts(served_tiny, tiny_llama, questions, bm25):
    local = run_batch(questions, sampler(tiny_llama, seed=7), bm25, KNOBS)
    client = OpenAIBackend(served_tiny, "tiny", tokenizer=str(tiny_llama), request_size=len(questions), temperature=1.0, seed=7)
    remote = run_batch(questions, client, bm25, KNOBS)
    assert [t.turns for t in remote] == [t.turns for t in local]  # every sampled byte, query and observation
    assert [[c.ids for c in t.completions] for t in remote] == [[c.ids for c in t.completions] for t in local]
    for mine, theirs in zip(local, remote):
        for a, b in zip(mine.completions, theirs.completions):
            assert len(a.logprobs) == len(a.ids) and b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    assert sum(len(t.turns) for t in local) > len(questions)  # multi-turn, every turn over HTTP
    assert client.describe()["decoder"] == "sampled at temperature 1.0, seed 7"

    greedy = run_batch(questions, sampler(tiny_llama, seed=7, temperature=0.0), bm25, KNOBS)
    other_seed = run_batch(questions, sampler(tiny_llama, seed=8), bm25, KNOBS)
    assert [t.turns for t in greedy] != [t.turns for t in local] != [t.turns for t in other_seed]  # really sampled, by the seed


def test_the_update_trains_on_the_sampled_ids_not_their_re_encoding(tiny_llama, questions, bm25):
    engine = sampler(tiny_llama, seed=3)
    one_turn = Knobs(max_new_tokens=16, max_searches=0)  # one generation: its context is exactly the prompt's ids
    trajectories = run_batch(questions, engine, bm25, one_turn)
    tokens = engine.tokens
    episodes = [rollout_episode(tokens, t, float(i % 2), i // 2, one_turn.max_context_tokens) for i, t in enumerate(trajectories)]
    re_encoded = [encode_episode(tokens, t.prompt, t.turns, 0.0, 0) for t in trajectories]
    differ = 0
    for episode, written, t in zip(episodes, re_encoded, trajectories):
        trained = [i for i, own in zip(episode.ids, episode.trained) if own]
        assert trained == list(t.completions[0].ids)  # the sampled ids, in order
        differ += trained != [i for i, own in zip(written.ids, written.trained) if own]
    assert differ  # some sampled sequences re-encode to other ids: training on text would train other tokens

    config = load_config("search-r1", "cpu-smoke") | {"prompts_per_step": 3, "micro_batch": 6}
    role = learner(config, tiny_llama, Accelerator(cpu=True), 10)
    stats = update(role, Accelerator(cpu=True), episodes, config, 0)
    assert stats.sampler_gap < 1e-4  # the learner scores the very tokens, under the very distribution, that were drawn
    assert "sampler_gap" in stats.metrics()


def test_an_episode_ends_before_a_turn_generated_from_a_cut_context(tiny_llama, questions, bm25):
    engine = sampler(tiny_llama, seed=5)
    prompt = len(engine.tokens.encode(engine.chat_prompt(user_prompt(questions[0].question))))
    knobs = Knobs(max_new_tokens=16, max_searches=2, max_context_tokens=prompt + 5)  # the prompt fits, the second turn's context does not
    [trajectory] = run_batch(questions[:1], engine, bm25, knobs)
    assert len(trajectory.turns) == 3 and len(engine.tokens.encode(trajectory.prompt)) == prompt
    episode = rollout_episode(engine.tokens, trajectory, 1.0, 0, knobs.max_context_tokens)
    assert episode.cut and sum(episode.trained) == len(trajectory.completions[0].ids)  # only the first turn is trained
    assert [x for x, own in zip(episode.sampled_logprobs, episode.trained) if own] == list(trajectory.completions[0].logprobs)
    assert all(math.isnan(x) for x, own in zip(episode.sampled_logprobs, episode.trained) if not own)
    whole = rollout_episode(engine.tokens, trajectory, 1.0, 0, 4096)
    assert not whole.cut and sum(whole.trained) == sum(len(c.ids) for c in trajectory.completions)
