"""Protocol v1 as a verl agent loop (training/verl_engine/agent_loop.py) against cfbench's in-process rollout.

The in-process rollout is the real one: the bundled search model sampled by the hf engine (temperature 1,
seeded) over the bundled corpus's BM25, through harness/agent.py's run_batch, run in cfbench's own venv
(CFBENCH_MAIN_PYTHON, default .venv/bin/python: verl pins transformers < 5.11, whose model forward
takes no `cache=` argument, so cfbench's hf engine cannot run beside verl). verl's LLM server client
is faked (this test is about the loop, not the server): it answers each prompt with the ids and
log-probs the hf engine sampled for that very prompt, plus the end-of-sequence id a vLLM server would
include, and refuses a prompt the engine never saw. So the verl loop must cut and tokenise every context
as the engine did, and then gives the same turns, the same sequence and mask (`<information>` passages
and invalid-action notes masked from the loss) and the same reward as the sequence the accelerate loop
trains on (core/episodes.rollout_episode).
"""

import asyncio
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from cfbench.harness import protocol
from cfbench.harness.agent import Trajectory
from cfbench.harness.backends import Completion
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.protocol import Knobs
from cfbench.harness.suite import Question
from cfbench.training.config.schema import to_json
from cfbench.training.core.episodes import rollout_episode
from cfbench.training.treatments import load_config
from cfbench.training.verl_engine.agent_loop import ProtocolV1AgentLoop
from cfbench.training.verl_engine.recipe import response_length

KNOBS = Knobs(max_new_tokens=48, max_searches=2)
ROOT = Path(__file__).parents[1]


class ReplayedServer:
    """verl's LLMServerClient.generate, answering from what the in-process engine sampled for the same prompt ids."""

    def __init__(self, sampled: dict[tuple[int, ...], tuple[list[int], list[float]]]) -> None:
        self.sampled, self.calls = sampled, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        self.calls.append(sampling_params)
        ids, logprobs = self.sampled[tuple(prompt_ids)]  # KeyError: a context the engine never saw
        return TokenOutput(token_ids=list(ids), log_probs=list(logprobs))


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    """cfbench's in-process rollout, run in cfbench's own environment (in_process_rollout.py), read back as Trajectories."""
    here = tmp_path_factory.mktemp("verl-run")
    python = os.environ.get("CFBENCH_MAIN_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    script = [str(here / "rollout.json"), str(KNOBS.max_new_tokens), str(KNOBS.max_searches), "11", "8"]
    subprocess.run(
        [python, str(Path(__file__).parent / "in_process_rollout.py"), *script], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    trajectories = []
    for row in json.loads((here / "rollout.json").read_text()):
        q = row["question"]
        t = Trajectory(Question(q["id"], q["benchmark"], q["question"], tuple(q["golden_answers"])), row["prompt"], row["prompt"])
        t.turns = row["turns"]
        t.completions = [Completion(**{**c, "ids": tuple(c["ids"]), "logprobs": tuple(c["logprobs"])}) for c in row["completions"]]
        trajectories.append(t)
    config = load_config("search-r1", "paper") | {"knobs": KNOBS.as_dict()}
    (here / "config.json").write_text(json.dumps(to_json(config)))
    return PromptTokens.load("smollm2-135m-search"), config, here / "config.json", trajectories


def test_the_verl_loop_gives_the_in_process_turns_masks_and_rewards(rollout):
    tokens, config, config_file, trajectories = rollout
    eos = tokens.tokenizer.eos_token_id
    sampled = {}
    for t in trajectories:
        context = t.prompt
        for turn, completion in zip(t.turns, t.completions):
            ended_by_eos = completion.finish == "stop" and completion.stop is None
            sampled[tuple(tokens.context(context, KNOBS.max_context_tokens))] = (
                list(completion.ids) + [eos] * ended_by_eos,
                list(completion.logprobs) + [-0.1] * ended_by_eos,
            )
            context += turn["generated"] + turn.get("observation", "")
    server = ReplayedServer(sampled)
    trainer_config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": KNOBS.max_context_tokens}}})

    async def verl_rollouts():
        outputs = []
        for t in trajectories:
            loop = ProtocolV1AgentLoop(
                trainer_config=DictConfigWrap(trainer_config),
                server_manager=server,
                tokenizer=tokens.tokenizer,
                processor=None,
                dataset_cls=RLHFDataset,
                data_config=DictConfigWrap(OmegaConf.create({})),
                hf_model_type="llama",
                config_file=str(config_file),
            )
            q = t.question
            info = {"id": q.id, "question": q.question, "golden_answers": list(q.golden_answers), "user": protocol.user_prompt(q.question)}
            outputs.append(await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, extra_info=info))
        return outputs

    outputs = asyncio.run(verl_rollouts())
    actions = set()
    for t, out in zip(trajectories, outputs, strict=True):
        reward = config.reward.of(t.prediction, list(t.question.golden_answers), t.turns)
        episode = rollout_episode(tokens, t, reward, 0, KNOBS.max_context_tokens)
        start = len(out.prompt_ids)
        assert out.extra_fields["turns"] == t.turns  # every generated byte, action, query, doc id and observation
        assert out.prompt_ids + out.response_ids == episode.ids and out.response_mask == episode.trained[start:]
        assert out.reward_score == reward
        lps = [0.0 if math.isnan(p) else p for p in episode.sampled_logprobs[start:]]
        assert out.response_logprobs == pytest.approx(lps)
        assert len(out.response_ids) <= response_length(config)
        masked = tokens.tokenizer.decode([i for i, m in zip(out.response_ids, out.response_mask) if not m])
        trained = tokens.tokenizer.decode([i for i, m in zip(out.response_ids, out.response_mask) if m])
        assert "<information>" not in trained and "My previous action is invalid" not in trained
        actions |= {turn["action"] for turn in t.turns}
        if any(turn["action"] == "search" for turn in t.turns):
            assert "<information>" in masked  # the passages are in the sequence, with no gradient
    assert "search" in actions and len(server.calls) == sum(len(t.turns) for t in trajectories)
    assert sum(t.reward_score for t in outputs) >= 0 and any(len(t.turns) > 1 for t in trajectories)  # multi-turn
    params = server.calls[0]
    assert params["stop"] == list(protocol.STOP) and params["max_tokens"] == KNOBS.max_new_tokens and params["include_stop_str_in_output"]
