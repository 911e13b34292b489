"""A role's update on verl: what cfbench's loop calls as `step_role(name, episodes)` (selfevolve/loop.py, Loop.updates).

Its episodes become a DataProto (episode_batch.py); verl's compute_advantage with `cfbench_grpo` (advantage.py)
gives each row its group's advantage (group id: the proposer's hop count, a solver's question); the role's
workers compute the log-probs its policy gives the rows now (verl's old_log_probs, the clipped ratio's anchor)
and, with a KL term, its reference's; then update_actor takes the step. The calls are those of verl's own
trainer (trainer/ppo/ray_trainer.py `_compute_old_log_prob`, `_compute_ref_log_prob`, `_update_actor`), written
out here because those are methods of a trainer that owns one worker group and its dataloader.

What differs from verl's trainer, and why:
  - one mini-batch holds the whole step (`objective.updates_per_batch` 1; launch refuses more): a self-evolution
    step's batch size is not fixed (a solver trains on the questions admitted that step), so it is not cut into
    verl's fixed-size mini-batches;
  - the loss divides by the step's episode count (`global_batch_size`), as cfbench's objective does (a token mean
    per episode, then the mean over the episodes);
  - rows are padded to a multiple of the GPUs (verl splits a batch evenly across them) with verl's
    `pad_dataproto_to_divisor`, after the advantages are computed; padded rows get no loss (response mask 0).
With `skip_empty_updates`, a step whose advantages are all zero takes no update, as core/policy_update.py.
Imports verl.
"""

from __future__ import annotations

from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.utils import need_reference_policy
from verl.utils import tensordict_utils as tu
from verl.utils.metric import reduce_metrics
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from cfbench.training.config.classes import SelfEvolutionConfig
from cfbench.training.core.episodes import Episode
from cfbench.training.core.objective import groups_with_signal
from cfbench.training.core.policy_update import UpdateStats
from cfbench.training.verl_engine.advantage import ADVANTAGE  # importing it registers cfbench_grpo in this process
from cfbench.training.verl_engine.episode_batch import episode_batch
from cfbench.training.verl_engine.roles import VerlRole


def update(role: VerlRole, episodes: list[Episode], config: SelfEvolutionConfig, pad_id: int, gpus: int) -> UpdateStats:
    """`role`'s step on `episodes` (every process of its worker group at once); the stats cfbench's metrics row reads."""
    signal = groups_with_signal([e.reward for e in episodes], [e.group for e in episodes])
    batch = episode_batch(episodes, pad_id, config.temperature)
    batch = compute_advantage(batch, adv_estimator=ADVANTAGE, norm_adv_by_std_in_grpo=True, config=role.config.algorithm)
    if config.skip_empty_updates and not batch.batch["advantages"].any():
        return UpdateStats(0.0, 0.0, groups_with_signal=signal, optimizer_step=False)
    batch, padded = pad_dataproto_to_divisor(batch, gpus)
    if padded:  # repeats of the first rows: no loss
        batch.batch["response_mask"][-padded:] = 0
        batch.batch["advantages"][-padded:] = 0
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(dim=-1).tolist()
    batch = batch.union(_log_probs(role.workers.compute_log_prob, batch, "old_log_probs"))
    if need_reference_policy(role.config):
        batch = batch.union(_log_probs(role.workers.compute_ref_log_prob, batch, "ref_log_prob"))
    metrics = _update_actor(role, batch, len(episodes))
    return UpdateStats(float(metrics["loss"]), float(metrics["grad_norm"]), groups_with_signal=signal)


def _log_probs(compute, batch: DataProto, key: str) -> DataProto:
    """The rows' response log-probs under a worker-group call (ray_trainer.py `_compute_old_log_prob`), as `key`."""
    data = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(data, calculate_entropy=False, compute_loss=False)
    logprobs = no_padding_2_padding(tu.get(compute(data), "log_probs"), data)
    return DataProto.from_tensordict(tu.get_tensordict({key: logprobs.float()}))


def _update_actor(role: VerlRole, batch: DataProto, episodes: int) -> dict:
    """One optimizer step on the whole batch (ray_trainer.py `_update_actor`), the loss divided by `episodes`."""
    actor, rollout = role.config.actor_rollout_ref.actor, role.config.actor_rollout_ref.rollout
    batch.meta_info["multi_turn"] = rollout.multi_turn.enable
    data = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(
        data,
        calculate_entropy=actor.calculate_entropy or actor.entropy_coeff != 0.0,
        distillation_use_topk=False,
        distillation_only=False,
        global_batch_size=episodes,
        mini_batch_size=len(batch),
        epochs=actor.ppo_epochs,
        seed=actor.data_loader_seed,
        dataloader_kwargs={"shuffle": actor.shuffle},
        compute_loss=True,
    )
    return reduce_metrics(tu.get(role.workers.update_actor(data), "metrics"))
