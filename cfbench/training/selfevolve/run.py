"""Self-evolution (Dr. Zero, MSV, CrossFit, MSV + CrossFit): a proposer and solvers trained in rounds.

Every step, scheduled or not for an update of a given role, runs the whole loop and is audited:
    1. draw the step's source tasks (training/sources.py); the proposer reads each source, searches
       n-1 times and proposes `<question>` + `<answer>` (sampled; strict parse, training/proposer.py);
    2. admission: every strictly parsed proposal (Dr. Zero, CrossFit), or only those whose
       source-aware and source-blind majorities agree, with the majority as label (MSV, training/msv.py);
    3. scoring: the question's scorer (the main solver; under CrossFit the other fold's auxiliary
       solver, training/crossfit.py) answers each admitted question `samples_per_prompt` times with the
       protocol's own agent loop; k answers match the adopted label; proposer reward =
       format_weight x format + f(k);
    4. update: in a round's first `proposer_steps` steps the proposer (advantage baseline over tasks of
       the same hop count in the batch); in its `solver_steps` steps the main solver on every admitted
       question (GRPO over its samples, reward = match with the adopted label) and, under CrossFit, each
       auxiliary solver on its own fold's questions. A solver that also scored a question trains on the
       very answers it scored with.

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

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate.utils import gather_object

from cfbench.harness.agent import Trajectory
from cfbench.harness.backends import Backend
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.checkpoints import TRAIN_RECORD
from cfbench.harness.corpus import load_corpus
from cfbench.harness.jsonl import write_jsonl
from cfbench.harness.protocol import Knobs, user_prompt
from cfbench.harness.suite import Question
from cfbench.training.config.choices import aux_updates_now
from cfbench.training.config.classes import RLConfig, SelfEvolutionConfig
from cfbench.training.config.schema import to_json
from cfbench.training.core.answers import MATCHER, matches
from cfbench.training.core.episodes import rollout_episode
from cfbench.training.core.learner import (
    append_row,
    ready_to_sample,
    sampler,
    save,
    start_roles,
)
from cfbench.training.core.plots import SELF_EVOLUTION_PANELS, plot_curves
from cfbench.training.core.policy_update import UpdateStats, update
from cfbench.training.core.rollouts import rollouts
from cfbench.training.core.served import AdapterSync
from cfbench.training.selfevolve import crossfit, msv, proposer
from cfbench.training.selfevolve.sources import Task, corpus_path, pool_folds, source_pool, tasks_for_step

ProposerEngine = Callable[[int], Backend | None]  # step -> engine, or None for the proposer's own sampler; only tests script it


def schedule(config: SelfEvolutionConfig, step: int) -> tuple[int, str, int]:
    """(round, phase, index within the phase) of 1-based `step`."""
    r, i = divmod(step - 1, config.proposer_steps + config.solver_steps)
    return (r + 1, "proposer", i) if i < config.proposer_steps else (r + 1, "solver", i - config.proposer_steps)


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
    provenance = crossfit.Provenance([*solver_names, "proposer"])  # the proposer's too: it writes the labels of Dr. Zero and CrossFit
    if start:
        saved = json.loads((out / f"checkpoint-{start}" / TRAIN_RECORD).read_text())["provenance"]
        provenance = crossfit.Provenance([*solver_names, "proposer"], saved)
    for stale in (out / "audit").glob("step-*.jsonl") if main else ():
        if int(stale.stem.split("-")[1]) > start:
            stale.unlink()
    retriever = retriever_for(config.retriever, None if config.corpus == "bundled" else corpus_path(config))
    texts = dict(zip(corpus.ids, corpus.contents))

    def ready(name: str) -> None:
        ready_to_sample(roles[name])

    loop = _Loop(config, tokens, retriever, provenance, texts, spread(accelerator, config.rollout_rows), ready)
    device = torch.cuda.get_device_name(accelerator.device) if accelerator.device.type == "cuda" else accelerator.device.type
    served = AdapterSync(config.rollout_server, out) if config.rollout_server else None

    last = out / f"checkpoint-{start}"
    pad = tokenizer.pad_token_id or 0
    for step in range(start + 1, config.steps + 1):
        began, began_cpu = time.time(), time.process_time()
        # a sharded role's sampler copy is shared by every role and refreshed before each of its rollouts (ready_to_sample)
        engines = {
            name: sampler(accelerator, roles[name], tokens, starts[name], config, step, name, served, False) for name in solver_names
        }
        scripted = proposer_engine(step) if proposer_engine else None
        engines["proposer"] = scripted or sampler(
            accelerator, roles["proposer"], tokens, starts["proposer"], config, step, "proposer", served, False
        )
        state = loop.rollouts(
            step, tasks_for_step(corpus, pool, step, config.prompts_per_step, config.seed, config.hop_weights), folds, engines
        )
        rolled = time.time()
        loop.updates(state, engines, lambda name, episodes: update(roles[name], accelerator, episodes, config, pad, references[name]))
        updated = time.time()
        row = state.metrics(rolled - began, updated - rolled, device)
        row["cpu_s"] = _cpu_seconds(accelerator, time.process_time() - began_cpu)  # every thread's; a paused run adds none
        if accelerator.num_processes > 1:
            row["processes"] = accelerator.num_processes  # each on its own device: the cost table's accelerator-hours
        if main:
            write_jsonl(out / "audit" / f"step-{step}.jsonl", state.audit_rows())
            append_row(out / "metrics.jsonl", row)
            plot_curves(out / "metrics.jsonl", out / "curves.png", SELF_EVOLUTION_PANELS)  # every step, as Search-R1's
        if step % config.save_every == 0 or step == config.steps:
            last = save(
                accelerator,
                roles,
                tokenizer,
                out,
                step,
                {"config": to_json(config), "provenance": provenance.to_json(), "corpus_sha256": corpus.sha256, "matcher": MATCHER},
            )
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


def solver_answers(
    items: list[tuple[str, str, str]], engine: Backend, retriever, knobs: Knobs, m: int, name: str, sample: Callable[..., list[Trajectory]]
) -> list[list[Trajectory]]:
    """`m` sampled protocol-v1 answers of each (task id, question, adopted label) by solver `name`, through `sample` (spread())."""
    asked = [Question(f"{tid}#{name}#{j}", "self-evolution", question, (label,)) for tid, question, label in items for j in range(m)]
    trajs = sample(asked, engine, retriever, knobs)
    return [trajs[i * m : (i + 1) * m] for i in range(len(items))]


def solver_episodes(tokens: PromptTokens, config: RLConfig, groups: list[tuple[list[Trajectory], str]]) -> list:
    """GRPO episodes of a solver's answers, one group per question, rewarded by matching its adopted label."""
    return [
        rollout_episode(tokens, tr, config.reward.of(tr.prediction, [label], tr.turns), group, config.knobs.max_context_tokens)
        for group, (trajs, label) in enumerate(groups)
        for tr in trajs
    ]


def _mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


class _Step:
    """Everything one step produced, for the updates, the audit rows and the metrics row."""

    def __init__(self, step: int, round_: int, phase: str, index: int, tasks: list[Task], texts: dict[str, str]) -> None:
        self.step, self.round, self.phase, self.index, self.tasks, self.texts = step, round_, phase, index, tasks, texts
        self.drafts: dict[str, Trajectory] = {}
        self.proposals: dict[str, proposer.Proposal] = {}
        self.formats: dict[str, float] = {}
        self.verdicts: dict[str, msv.Verdict] = {}
        self.labels: dict[str, str] = {}  # admitted task id -> adopted label
        self.folds: dict[str, int] = {}
        self.scorers: dict[str, str] = {}
        self.scorer_provenance: dict[str, dict] = {}
        self.label_provenance: dict[str, dict] = {}
        self.responses: dict[str, list[Trajectory]] = {}
        self.k: dict[str, int] = {}
        self.rewards: dict[str, float] = {}
        self.solver_rewards: list[float] = []
        self.updated: dict[str, UpdateStats] = {}  # role -> its update this step
        self.response_tokens: list[int] = []  # per proposer rollout
        self.generations = 0  # every trajectory sampled this step (proposer, MSV answers, solver answers)
        self.generated_tokens = 0  # their generated tokens

    @property
    def admitted(self) -> list[Task]:
        return [t for t in self.tasks if t.id in self.labels]

    def audit_rows(self) -> list[dict]:
        rows = []
        for t in self.tasks:
            p, v = self.proposals[t.id], self.verdicts.get(t.id)
            rows.append(
                {
                    "step": self.step,
                    "round": self.round,
                    "phase": self.phase,
                    "task_id": t.id,
                    "source_id": t.source_id,
                    "source": t.contents,
                    "hops": t.hops,
                    "fold": self.folds[t.id],
                    "proposer_turns": self.drafts[t.id].turns,
                    "evidence": [
                        {"turn": n, "id": d, "contents": self.texts[d]}
                        for n, turn in enumerate(self.drafts[t.id].turns, start=1)
                        for d in turn["doc_ids"]
                    ],
                    "draft_question": p.question,
                    "draft_label": p.answer,
                    "format": self.formats[t.id],
                    "parse_error": p.error,
                    "msv": None
                    if v is None
                    else {"aware": v.aware, "blind": v.blind, "aware_majority": v.aware_majority, "blind_majority": v.blind_majority},
                    "admitted": t.id in self.labels,
                    "adopted_label": self.labels.get(t.id),
                    "scorer": self.scorers.get(t.id),
                    "scorer_provenance": self.scorer_provenance.get(t.id),
                    "label_provenance": self.label_provenance.get(t.id),
                    "solver_responses": [{"prediction": r.prediction, "turns": r.turns} for r in self.responses.get(t.id, [])],
                    "k": self.k.get(t.id),
                    "proposer_reward": self.rewards[t.id],
                }
            )
        return rows

    def metrics(self, rollout_s: float, update_s: float, device: str) -> dict:
        n, admitted = len(self.tasks), self.admitted
        trained = self.updated.get("proposer" if self.phase == "proposer" else "main")  # the phase's role, None when it had nothing
        candidates = sum(not p.error for p in self.proposals.values())
        return {
            "step": self.step,
            "round": self.round,
            "phase": self.phase,
            "tasks": n,
            "format": _mean(list(self.formats.values())),
            "candidates": candidates,
            "admitted": len(admitted),
            "rejected": candidates - len(admitted),
            "msv_generations": 6 * len(self.verdicts),
            "generations": self.generations,
            "generated_tokens": self.generated_tokens,
            "agreement": _mean([self.k[t.id] / len(self.responses[t.id]) for t in admitted]),
            "proposer_reward": _mean(list(self.rewards.values())),
            "solver_reward": _mean(self.solver_rewards),
            "losses": {name: u.loss for name, u in self.updated.items()},
            "loss": None if trained is None else trained.loss,
            "groups_with_signal": None if trained is None else trained.groups_with_signal,
            "optimizer_step": None if trained is None else trained.optimizer_step,
            "signal_by_role": {name: u.groups_with_signal for name, u in self.updated.items()},
            "optimizer_steps": {name: u.optimizer_step for name, u in self.updated.items()},
            "response_tokens": _mean(self.response_tokens),
            "searches_per_rollout": _mean([sum(x["action"] == "search" for x in d.turns) for d in self.drafts.values()]),
            "rollout_s": round(rollout_s, 3),
            "update_s": round(update_s, 3),
            "device": device,
        }


class _Loop:
    def __init__(
        self,
        config: SelfEvolutionConfig,
        tokens: PromptTokens,
        retriever,
        provenance: crossfit.Provenance,
        texts: dict[str, str],
        spread: Callable[..., list[Trajectory]],
        ready: Callable[[str], None],
    ) -> None:
        self.config, self.tokens, self.retriever, self.provenance = config, tokens, retriever, provenance
        self.spread, self.ready = spread, ready  # the step's rollouts shared among the processes; a role's weights put in its sampler
        self.texts = texts  # passage id -> contents: the judge reads the proposer's evidence in full, not as truncated in its context
        self.knobs = config.knobs
        self.m = config.samples_per_prompt

    def rollouts(self, step: int, tasks: list[Task], folds: dict[str, int], engines: dict[str, Backend]) -> _Step:
        c = self.config
        s = _Step(step, *schedule(c, step), tasks, self.texts)
        for hops in sorted({t.hops for t in tasks}):  # the proposer's search budget is its task's n-1
            group = [t for t in tasks if t.hops == hops]
            budget = dataclasses.replace(c.knobs, max_searches=hops - 1)
            asked = [Question(t.id, "proposer", "", ()) for t in group]
            trajs = self.sample("proposer", asked, engines["proposer"], budget, [proposer.prompt(t) for t in group])
            s.drafts.update((t.id, tr) for t, tr in zip(group, trajs, strict=True))
        s.response_tokens = [self._spent(s, [s.drafts[t.id]]) for t in tasks]
        for t in tasks:
            s.proposals[t.id] = proposer.parse(s.drafts[t.id].turns, t.hops)
            s.formats[t.id] = proposer.format_score(c.proposer_format, s.drafts[t.id].turns, s.proposals[t.id])
            s.folds[t.id] = crossfit.fold(t, folds, c.control)
        candidates = [t for t in tasks if not s.proposals[t.id].error]
        if c.msv:
            self._verify(s, candidates, engines["main"])
        else:
            s.labels.update((t.id, s.proposals[t.id].answer) for t in candidates)
        by_scorer: dict[str, list[Task]] = {}
        labeller = "main" if c.msv else "proposer"  # MSV adopts the main solver's source-aware majority
        for t in s.admitted:
            s.label_provenance[t.id] = {
                "model": labeller,
                "trained_on_this_source": self.provenance.of(labeller, t.source_id)["trained_on_this_source"],
            }
            s.scorers[t.id] = crossfit.scorer(s.folds[t.id], c.crossfit, c.control)
            s.scorer_provenance[t.id] = self.provenance.of(s.scorers[t.id], t.source_id)
            by_scorer.setdefault(s.scorers[t.id], []).append(t)
        for name, group in by_scorer.items():
            s.responses.update(self._answers(s, group, engines[name], name))
        for t in tasks:
            k = None
            if t.id in s.labels:
                k = s.k[t.id] = sum(matches(r.prediction, s.labels[t.id]) for r in s.responses[t.id])
            s.rewards[t.id] = proposer.reward(c.format_weight, s.formats[t.id], k, self.m)
        return s

    def _verify(self, s: _Step, candidates: list[Task], engine: Backend) -> None:
        questions = [s.proposals[t.id].question for t in candidates]
        users = [
            p
            for t, q in zip(candidates, questions)
            for p in [msv.source_aware_prompt(q, t.contents)] * msv.SAMPLES + [user_prompt(q)] * msv.SAMPLES
        ]
        asked = [Question(f"{t.id}#msv{j}", "msv", q, ()) for t, q in zip(candidates, questions) for j in range(2 * msv.SAMPLES)]
        trajs = self.sample("main", asked, engine, self.knobs, users)
        self._spent(s, trajs)
        answers = [tr.prediction for tr in trajs]
        for i, t in enumerate(candidates):
            mine = answers[i * 2 * msv.SAMPLES : (i + 1) * 2 * msv.SAMPLES]
            s.verdicts[t.id] = v = msv.admit(mine[: msv.SAMPLES], mine[msv.SAMPLES :])
            if v.admitted:
                s.labels[t.id] = v.label

    def _answers(self, s: _Step, tasks: list[Task], engine: Backend, name: str) -> dict[str, list[Trajectory]]:
        answers = solver_answers(
            [(t.id, s.proposals[t.id].question, s.labels[t.id]) for t in tasks],
            engine,
            self.retriever,
            self.knobs,
            self.m,
            name,
            lambda asked, engine, retriever, knobs: self.sample(name, asked, engine, knobs),
        )
        self._spent(s, [tr for trs in answers for tr in trs])
        return {t.id: trs for t, trs in zip(tasks, answers)}

    def sample(self, name: str, asked: list[Question], engine: Backend, knobs: Knobs, user_prompts: list[str] | None = None):
        """Role `name`'s rollouts of `asked`, shared among the processes (every process calls this at the same point)."""
        self.ready(name)
        return self.spread(asked, engine, self.retriever, knobs, user_prompts=user_prompts)

    def _spent(self, s: _Step, trajs: list[Trajectory]) -> int:
        """Count the trajectories and their generated tokens in the step's cost; returns the tokens."""
        n = sum(len(self.tokens.text_ids(turn["generated"])) for tr in trajs for turn in tr.turns)
        s.generations += len(trajs)
        s.generated_tokens += n
        return n

    def updates(self, s: _Step, engines: dict[str, Backend], step_role: Callable[[str, list], UpdateStats]) -> None:
        """Every role's update of the step, recorded in s.updated."""
        c = self.config
        if s.phase == "proposer":
            cut = c.knobs.max_context_tokens
            episodes = [rollout_episode(self.tokens, s.drafts[t.id], s.rewards[t.id], t.hops, cut) for t in s.tasks]
            s.updated["proposer"] = step_role("proposer", episodes)  # groups = hop counts: the HRPO baseline
            for t in s.tasks:
                self.provenance.add("proposer", s.folds[t.id], t.source_id)
            return
        for name in crossfit.solvers(c.crossfit, c.control):
            if name != "main" and not aux_updates_now(c.aux_budget, s.index):
                continue
            mine = [t for t in s.admitted if name in crossfit.trainers(s.folds[t.id], c.crossfit, c.control)]
            if not mine:
                continue
            own = [t for t in mine if s.scorers[t.id] != name]
            samples = {**{t.id: s.responses[t.id] for t in mine if s.scorers[t.id] == name}, **self._answers(s, own, engines[name], name)}
            episodes = solver_episodes(self.tokens, c, [(samples[t.id], s.labels[t.id]) for t in mine])
            if name == "main":
                s.solver_rewards += [e.reward for e in episodes]
            s.updated[name] = step_role(name, episodes)
            for t in mine:
                self.provenance.add(name, s.folds[t.id], t.source_id)
