"""Protocol v1 as a verl agent loop (`cfbench_protocol_v1`): one training trajectory, turn by turn, on verl's vLLM.

Each turn is the harness's own (harness/agent.py): the context cut to its last max_context_tokens
tokens (PromptTokens.context, as every engine cuts it) goes to verl's LLM server client as token
ids; the sampled ids come back and become a Completion exactly as the hf engine makes one
(PromptTokens.completion); `take_turn` parses and records the turn and `observe` adds the passages.
The trajectory then becomes verl's output through `rollout_episode`, the sequence the accelerate
loop trains on: the prompt's ids, then each turn's sampled ids (mask 1) and its observation's ids
(mask 0: `<information>` passages and invalid-action notes get no gradient), ending before a turn
generated from a cut context. Its reward is the config's (cfbench_grpo turns it into the advantage).

The self-evolution driver (driver.py) sends its own rows (sampling.py): a row's extra_info may carry
`max_searches` (the proposer's budget is its task's hop count less one) and its `user` prompt is the
role's (the proposer's source, MSV's source-aware prompt). Every output carries the trajectory in its
extra fields (`prompt`, `turns`, `completions`), from which the driver rebuilds it for cfbench's loop.

verl instantiates the loop once per trajectory, with the entry of the run's agent_loops.yaml
(`write_registry`): `config_file`, the run's cfbench config (knobs, reward, retriever). The
retriever is built once per worker process and searched on its own thread.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any
from uuid import uuid4

import yaml
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from cfbench.harness import protocol
from cfbench.harness.agent import Trajectory, observe, take_turn
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.suite import Question
from cfbench.training.config.classes import RLConfig, read_run_config
from cfbench.training.core.episodes import rollout_episode
from cfbench.training.verl_engine.recipe import AGENT_LOOP, response_length


@functools.cache
def _run_config(config_file: str) -> RLConfig:
    return read_run_config(Path(config_file))


# One thread per worker process builds and queries the retriever: its result cache is SQLite, whose connection
# belongs to the thread that opened it, and verl runs many trajectories' coroutines on one event loop.
_RETRIEVAL = ThreadPoolExecutor(max_workers=1)


@functools.cache
def _retriever(spec: str):
    from cfbench.harness.retrievers.choose import retriever_for

    return _RETRIEVAL.submit(retriever_for, spec).result()


@register(AGENT_LOOP)
class ProtocolV1AgentLoop(AgentLoopBase):
    def __init__(self, *args, config_file: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.run_config = _run_config(config_file)
        self.retriever = _retriever(self.run_config.retriever)
        self.tokens = PromptTokens(self.tokenizer)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        info, knobs = kwargs["extra_info"], self.run_config.knobs
        if "max_searches" in info:
            knobs = replace(knobs, max_searches=int(info["max_searches"]))
        question = Question(info["id"], "train", info["question"], tuple(info["golden_answers"]))
        prompt = self.tokens.chat_prompt(info["user"])
        traj = Trajectory(question, prompt, prompt)
        params = {**sampling_params, "max_tokens": knobs.max_new_tokens, "stop": list(protocol.STOP), "include_stop_str_in_output": True}
        eos = self.tokenizer.eos_token_id
        for _ in range(knobs.max_searches + 1):
            out = await self.server_manager.generate(
                request_id=uuid4().hex, prompt_ids=self.tokens.context(traj.context, knobs.max_context_tokens), sampling_params=params
            )
            ids, logprobs = list(out.token_ids), list(out.log_probs or [math.nan] * len(out.token_ids))
            if ids and ids[-1] == eos:  # the hf engine leaves end-of-sequence out of a completion's ids
                ids, logprobs = ids[:-1], logprobs[:-1]
            if take_turn(traj, self.tokens.completion(ids, logprobs, protocol.STOP, knobs.max_new_tokens), knobs):
                (hits,) = await self.loop.run_in_executor(_RETRIEVAL, self.retriever.search, [traj.turns[-1]["query"]], knobs.topk)
                observe(traj, hits, self.tokens, knobs)
            if traj.done:
                break
        reward = self.run_config.reward.of(traj.prediction, list(question.golden_answers), traj.turns)
        episode = rollout_episode(self.tokens, traj, reward, 0, knobs.max_context_tokens)
        start, end = len(self.tokens.encode(prompt)), len(self.tokens.encode(prompt)) + response_length(self.run_config)
        logprobs = [0.0 if math.isnan(p) else p for p in episode.sampled_logprobs[start:end]]  # 0 where masked
        return AgentLoopOutput(
            prompt_ids=episode.ids[:start],
            response_ids=episode.ids[start:end],
            response_mask=episode.trained[start:end],
            response_logprobs=logprobs,
            reward_score=reward,
            num_turns=1 + 2 * len(traj.turns),  # the user's prompt, then each turn's model text and observation
            metrics=AgentLoopMetrics(),
            extra_fields={"prompt": prompt, "turns": traj.turns, "completions": [asdict(c) for c in traj.completions], "cut": episode.cut},
        )


def write_registry(path: Path, config_file: Path) -> None:
    """The agent-loop registry verl reads (rollout.agent.agent_loop_config_path): this loop, given the run's config file."""
    entry = {"name": AGENT_LOOP, "_target_": f"{__name__}.{ProtocolV1AgentLoop.__qualname__}", "config_file": str(config_file)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump([entry], sort_keys=False))
