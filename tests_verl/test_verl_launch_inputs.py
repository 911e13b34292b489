"""What `cfbench train --engine verl` writes before verl starts (launch.write_inputs), read back by verl's own
pieces: its dataset yields the rows the agent loop reads, in cfbench's order, and its agent-loop registry
instantiates protocol v1's loop with the run's config."""

import asyncio
import random
from pathlib import Path

import hydra
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.utils.dataset.rl_dataset import RLHFDataset

from cfbench.harness import protocol
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.training.config.classes import read_run_config
from cfbench.training.core.data import load_train_set
from cfbench.training.treatments import load_config
from cfbench.training.verl_engine.agent_loop import ProtocolV1AgentLoop
from cfbench.training.verl_engine.launch import compose, write_inputs
from cfbench.training.verl_engine.recipe import AGENT_LOOP, verl_configs


def test_verls_dataset_and_registry_read_what_the_launch_writes(tmp_path):
    config = load_config("search-r1", "paper") | {"steps": 2, "prompts_per_step": 8}
    (tree,) = verl_configs(config, tmp_path, 1).values()  # 8 x 5 rows: whole micro-batches of 8 on one GPU
    run = Path(tree["data"]["train_files"]).parent
    write_inputs(config, run)
    tokenizer = PromptTokens.load("smollm2-135m-search").tokenizer
    data = RLHFDataset(tree["data"]["train_files"], tokenizer, compose(tree).data)
    questions = load_train_set(config.train_set, sources=config.sources)
    random.Random(config.seed).shuffle(questions)
    assert len(data) == config.steps * config.prompts_per_step
    for i in range(len(data)):
        row = data[i]
        assert row["agent_name"] == AGENT_LOOP and row["extra_info"]["id"] == questions[i].id  # the accelerate loop's order
        assert row["raw_prompt"] == [{"role": "user", "content": protocol.user_prompt(questions[i].question)}]
        assert list(row["extra_info"]["golden_answers"]) == list(questions[i].golden_answers)
    (entry,) = OmegaConf.load(tree["actor_rollout_ref"]["rollout"]["agent"]["agent_loop_config_path"])
    assert entry.name == AGENT_LOOP and read_run_config(Path(entry.config_file)) == config

    async def instantiate():  # as verl's AgentLoopWorker does, inside its event loop
        return hydra.utils.instantiate(
            config=entry,
            trainer_config=DictConfigWrap(compose(tree)),
            server_manager=None,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type="llama",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(compose(tree).data),
        )

    loop = asyncio.run(instantiate())
    assert isinstance(loop, ProtocolV1AgentLoop) and loop.run_config == config
