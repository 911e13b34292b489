"""Self-evolution (Dr. Zero, MSV, CrossFit, MSV + CrossFit) on cfbench's own learners: selfevolve/loop.py's
`Loop` driven by accelerate (one process or several, CPU or GPU).

Run directory, beside the training core's config.json, metrics.jsonl, curves.png and checkpoint-N/
(the main solver at the top, `proposer/` and the auxiliary solvers in sub-directories):
    folds.json            the run's source pool, how often each source is proposed per round, the connected
                          groups and the fold of every source, decided when the run starts
    audit/step-N.jsonl    one row per task: source, the passages the proposer retrieved (evidence, in search
                          order), proposal, admission, adopted label, fold, scorer and its training
                          provenance, the label's provenance (the proposer's draft, or under MSV the
                          main solver's majority, and whether that model had trained on the source),
                          the scorer's responses, k, proposer reward
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate.utils import gather_object

from cfbench.harness.agent import Trajectory
from cfbench.harness.backends import Backend
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.corpus import load_corpus
from cfbench.harness.protocol import Knobs
from cfbench.harness.suite import Question
from cfbench.training.config.classes import SelfEvolutionConfig
from cfbench.training.core.learner import process_stream, ready_to_sample, sampler, save, start_roles
from cfbench.training.core.policy_update import update
from cfbench.training.core.rollouts import rollouts
from cfbench.training.core.served import AdapterSync
from cfbench.training.selfevolve import crossfit
from cfbench.training.selfevolve.loop import Loop, checkpoint_record, drop_audits_after, record_step, restored_provenance
from cfbench.training.selfevolve.sources import corpus_path, pool_folds, source_pool, tasks_for_step

ProposerEngine = Callable[[int], Backend | None]  # step -> engine, or None for the proposer's own sampler; only tests script it


def self_evolve(
    config: SelfEvolutionConfig,
    out: Path,
    start: int,
    resume: bool,
    accelerator,
    on_step: Callable[[dict], None],
    proposer_engine: ProposerEngine | None = None,
) -> Path:
    from cfbench.harness.retrievers.choose import retriever_for

    main = accelerator.is_main_process
    corpus = load_corpus(corpus_path(config))
    pool = source_pool(corpus, config.source_pool, config.seed)
    tasks_per_round = (config.proposer_steps + config.solver_steps) * config.prompts_per_step
    if main:  # decided (or checked) once; the other processes read what the main one wrote
        pool_folds(corpus, pool, out, resume, tasks_per_round)
        (out / "audit").mkdir(exist_ok=True)
    accelerator.wait_for_everyone()
    folds = pool_folds(corpus, pool, out, True, tasks_per_round)
    solver_names = crossfit.solvers(config.crossfit, config.control)
    names = ["main", "proposer", *solver_names[1:]]
    # every role starts from the run's model, the proposer from proposer_model when the config names one
    starts, tokenizer, roles, references = start_roles(config, out, start, accelerator, {name: config.updates_of(name) for name in names})
    tokens = PromptTokens(tokenizer)
    # the proposer's too: it writes the labels of Dr. Zero and CrossFit
    provenance = restored_provenance(out, start, [*solver_names, "proposer"])
    if main:
        drop_audits_after(out, start)
    retriever = retriever_for(config.retriever, None if config.corpus == "bundled" else corpus_path(config))
    texts = dict(zip(corpus.ids, corpus.contents))

    def ready(name: str) -> None:
        ready_to_sample(roles[name])

    loop = Loop(config, tokens, retriever, provenance, texts, spread(accelerator, config.rollout_rows), ready)
    device = torch.cuda.get_device_name(accelerator.device) if accelerator.device.type == "cuda" else accelerator.device.type
    served = AdapterSync(config.rollout_server, out) if config.rollout_server else None
    # each process samples its share of a batch (spread) from its own stream; a served adapter keeps the role's name
    streams = {name: process_stream(name, accelerator) for name in names}

    last = out / f"checkpoint-{start}"
    pad = tokenizer.pad_token_id or 0
    for step in range(start + 1, config.steps + 1):
        began, began_cpu = time.time(), time.process_time()
        # a sharded role's sampler copy is shared by every role and refreshed before each of its rollouts (ready_to_sample)
        engines = {
            name: sampler(accelerator, roles[name], tokens, starts[name], config, step, streams[name], served, False, name)
            for name in solver_names
        }
        scripted = proposer_engine(step) if proposer_engine else None
        proposer = config.for_role("proposer")
        engines["proposer"] = scripted or sampler(
            accelerator, roles["proposer"], tokens, starts["proposer"], proposer, step, streams["proposer"], served, False, "proposer"
        )
        state = loop.rollouts(
            step, tasks_for_step(corpus, pool, step, config.prompts_per_step, config.seed, config.hop_weights), folds, engines
        )
        rolled = time.time()
        loop.updates(
            state, engines, lambda name, episodes: update(roles[name], accelerator, episodes, config.for_role(name), pad, references[name])
        )
        updated = time.time()
        row = state.metrics(rolled - began, updated - rolled, device)
        row["cpu_s"] = _cpu_seconds(accelerator, time.process_time() - began_cpu)  # every thread's; a paused run adds none
        if accelerator.num_processes > 1:
            row["processes"] = accelerator.num_processes  # each on its own device: the cost table's accelerator-hours
        if main:
            record_step(out, state, row)
        if step % config.save_every == 0 or step == config.steps:
            last = save(accelerator, roles, tokenizer, out, step, checkpoint_record(config, provenance, corpus.sha256))
        if main:
            on_step(row)
    return last


def spread(accelerator, rows: int | None) -> Callable[..., list[Trajectory]]:
    """core.rollouts.rollouts, each process sampling its share (every world-th trajectory) and every process
    getting the whole list back in order. Every process then holds the same step, so each role's update
    runs on the whole batch in every process: its gradient reduced across them is the single process's,
    whether the role is replicated or sharded (core/sharding.py)."""

    def run(asked: list[Question], engine: Backend, retriever, knobs: Knobs, user_prompts: list[str] | None = None) -> list[Trajectory]:
        world, rank = accelerator.num_processes, accelerator.process_index
        if world == 1:
            return rollouts(asked, engine, retriever, knobs, rows, user_prompts=user_prompts)
        mine = range(rank, len(asked), world)
        prompts = [user_prompts[i] for i in mine] if user_prompts else None
        sampled = rollouts([asked[i] for i in mine], engine, retriever, knobs, rows, prompts)
        return [t for _, t in sorted(gather_object(list(zip(mine, sampled))), key=lambda pair: pair[0])]

    return run


def _cpu_seconds(accelerator, seconds: float) -> float:
    """CPU seconds of every process's threads."""
    if accelerator.num_processes == 1:
        return round(seconds, 3)
    total = accelerator.reduce(torch.tensor([seconds], dtype=torch.float64, device=accelerator.device), "sum")
    return round(float(total[0]), 3)
