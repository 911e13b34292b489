"""Self-evolution (Dr. Zero, MSV, CrossFit, MSV + CrossFit): a proposer and solvers trained in rounds.

Every step, scheduled or not for an update of a given role, runs the whole loop and is audited:
    1. draw the step's source tasks (selfevolve/sources.py); the proposer reads each source, searches
       n-1 times and proposes `<question>` + `<answer>` (sampled; strict parse, selfevolve/proposer.py);
    2. admission: every strictly parsed proposal (Dr. Zero, CrossFit), or only those whose
       source-aware and source-blind majorities agree, with the majority as label (MSV, selfevolve/msv.py);
    3. scoring: the question's scorer (the main solver; under CrossFit the other fold's auxiliary
       solver, selfevolve/crossfit.py) answers each admitted question `samples_per_prompt` times with the
       protocol's own agent loop; k answers match the adopted label; proposer reward =
       format_weight x format + f(k);
    4. update: in a round's first `proposer_steps` steps the proposer (advantage baseline over tasks of
       the same hop count in the batch); in its `solver_steps` steps the main solver on every admitted
       question (GRPO over its samples, reward = match with the adopted label) and, under CrossFit, each
       auxiliary solver on its own fold's questions. A solver that also scored a question trains on the
       very answers it scored with.

`Loop` is the loop; selfevolve/run.py drives it on cfbench's own learners (accelerate) and
verl_engine/driver.py on verl's roles, each giving it a way to sample (a role's rollouts) and to update
a role; both record a step and restore a checkpoint's provenance with the functions below, so their run
directories are one format.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from cfbench.harness.agent import Trajectory
from cfbench.harness.backends import Backend
from cfbench.harness.backends.tokens import PromptTokens
from cfbench.harness.checkpoints import TRAIN_RECORD
from cfbench.harness.jsonl import write_jsonl
from cfbench.harness.protocol import Knobs, user_prompt
from cfbench.harness.suite import Question
from cfbench.training.config.choices import aux_updates_now
from cfbench.training.config.classes import RLConfig, SelfEvolutionConfig
from cfbench.training.config.schema import to_json
from cfbench.training.core.answers import MATCHER, matches
from cfbench.training.core.episodes import rollout_episode
from cfbench.training.core.learner import append_row
from cfbench.training.core.plots import SELF_EVOLUTION_PANELS, plot_curves
from cfbench.training.core.policy_update import UpdateStats
from cfbench.training.selfevolve import crossfit, msv, proposer
from cfbench.training.selfevolve.sources import Task


def schedule(config: SelfEvolutionConfig, step: int) -> tuple[int, str, int]:
    """(round, phase, index within the phase) of 1-based `step`."""
    r, i = divmod(step - 1, config.proposer_steps + config.solver_steps)
    return (r + 1, "proposer", i) if i < config.proposer_steps else (r + 1, "solver", i - config.proposer_steps)


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


class Step:
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


class Loop:
    """One step of self-evolution, whatever runs the roles: `spread` samples a role's rollouts (given after `ready`
    has put the role's current weights in its sampler), and `updates` hands each role's episodes to `step_role`."""

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

    def rollouts(self, step: int, tasks: list[Task], folds: dict[str, int], engines: dict[str, Backend]) -> Step:
        c = self.config
        s = Step(step, *schedule(c, step), tasks, self.texts)
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

    def _verify(self, s: Step, candidates: list[Task], engine: Backend) -> None:
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

    def _answers(self, s: Step, tasks: list[Task], engine: Backend, name: str) -> dict[str, list[Trajectory]]:
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

    def _spent(self, s: Step, trajs: list[Trajectory]) -> int:
        """Count the trajectories and their generated tokens in the step's cost; returns the tokens."""
        n = sum(len(self.tokens.text_ids(turn["generated"])) for tr in trajs for turn in tr.turns)
        s.generations += len(trajs)
        s.generated_tokens += n
        return n

    def updates(self, s: Step, engines: dict[str, Backend], step_role: Callable[[str, list], UpdateStats]) -> None:
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


def restored_provenance(out: Path, start: int, names: list[str]) -> crossfit.Provenance:
    """The roles' training provenance as checkpoint-`start` saved it (empty for a new run)."""
    if not start:
        return crossfit.Provenance(names)
    return crossfit.Provenance(names, json.loads((out / f"checkpoint-{start}" / TRAIN_RECORD).read_text())["provenance"])


def drop_audits_after(out: Path, start: int) -> None:
    """Remove the audit rows of steps after checkpoint-`start` (written before a stop, their checkpoint never saved)."""
    for stale in (out / "audit").glob("step-*.jsonl"):
        if int(stale.stem.split("-")[1]) > start:
            stale.unlink()


def record_step(out: Path, state: Step, row: dict) -> None:
    """The step's audit rows, its metrics row and the curves drawn again."""
    write_jsonl(out / "audit" / f"step-{state.step}.jsonl", state.audit_rows())
    append_row(out / "metrics.jsonl", row)
    plot_curves(out / "metrics.jsonl", out / "curves.png", SELF_EVOLUTION_PANELS)  # every step, as Search-R1's


def checkpoint_record(config: SelfEvolutionConfig, provenance: crossfit.Provenance, corpus_sha256: str) -> dict:
    """What every checkpoint-N records beside its weights (TRAIN_RECORD): how it was made and what each role trained on."""
    return {"config": to_json(config), "provenance": provenance.to_json(), "corpus_sha256": corpus_sha256, "matcher": MATCHER}
