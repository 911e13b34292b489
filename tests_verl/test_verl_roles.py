"""The self-evolution roles as verl pieces (training/verl_engine/roles.py), on CPU: no Ray cluster, no vLLM.

vLLM's replica class cannot be imported without vLLM, so verl's replica registry is pointed at a stand-in subclass of
verl's own RolloutReplica for the server-name test: what is checked is that each role's LLMServerManager builds its
replicas with the role as `name_suffix`, and that the names vLLMReplica gives its servers with those suffixes
(vllm_async_server.py, vLLMReplica.launch_servers: f"{prefix}server_{replica_rank}_{node_rank}{name_suffix}") are
unique across every role of a treatment, where without them they collide. That vLLM's servers take these names and
the adapters reach them through the bound handles is checked only on a GPU (docs/training-at-scale.md).
"""

from pathlib import Path
from types import SimpleNamespace

import pytest
from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry

from cfbench.training.treatments import load_config
from cfbench.training.verl_engine.launch import compose
from cfbench.training.verl_engine.recipe import verl_configs
from cfbench.training.verl_engine.roles import RoleServers, RoleWorker, resource_pool, worker_class

GPUS = 8
TREATMENTS = [("dr-zero", {}), ("msv", {}), ("crossfit", {}), ("msv-crossfit", {}), ("crossfit", {"control": "full-data"})]


def role_configs(treatment: str, flags: dict) -> dict:
    return {role: compose(tree) for role, tree in verl_configs(load_config(treatment, "paper", **flags), Path("runs/x"), GPUS).items()}


class StandInReplica(RolloutReplica):
    async def launch_servers(self) -> None:  # vLLMReplica's launches vLLM; only its name matters here
        pass


def server_names(replica) -> list[str]:
    """The names vLLMReplica.launch_servers gives this replica's servers (its prefix hook returns "vllm_")."""
    return [f"vllm_server_{replica.replica_rank}_{node}{replica.name_suffix}" for node in range(replica.nnodes)]


@pytest.mark.parametrize(("treatment", "flags"), TREATMENTS)
def test_every_roles_vllm_servers_have_their_own_names(treatment, flags, monkeypatch):
    monkeypatch.setitem(RolloutReplicaRegistry._registry, "vllm", lambda: StandInReplica)
    configs = role_configs(treatment, flags)
    workers = SimpleNamespace(world_size=GPUS, workers=list(range(GPUS)))
    names, unsuffixed = [], []
    for role, cfg in configs.items():
        servers = RoleServers(config=cfg, worker_group=workers, rollout_resource_pool=None, role=role)
        rollout = cfg.actor_rollout_ref.rollout
        for rank in range(GPUS // rollout.tensor_model_parallel_size):  # as LLMServerManager builds them
            replica = servers.rollout_replica_class(
                replica_rank=rank, config=rollout, model_config=cfg.actor_rollout_ref.model, gpus_per_node=rollout.n_gpus_per_node
            )
            assert isinstance(replica, StandInReplica) and replica.name_suffix == f"_{role}"
            names += server_names(replica)
            unsuffixed += server_names(SimpleNamespace(replica_rank=rank, nnodes=replica.nnodes, name_suffix=""))
    assert len(configs) >= 2 and len(names) == len(configs) * GPUS
    assert len(set(names)) == len(names)
    assert len(set(unsuffixed)) == GPUS < len(unsuffixed)  # what two hybrid roles in one Ray job did before


def test_a_role_worker_is_verls_hybrid_worker_bound_to_its_own_servers():
    assert issubclass(RoleWorker, ActorRolloutRefWorker)
    assert getattr(RoleWorker.bind_rollout_servers, MAGIC_ATTR)["dispatch_mode"] == Dispatch.ONE_TO_ALL  # called on every rank
    servers = {0: "proposer's replica 0", 1: "proposer's replica 1"}
    for rank in (0, 1):
        worker = SimpleNamespace(rollout=SimpleNamespace(replica_rank=rank, server_handle=None))
        RoleWorker.bind_rollout_servers(worker, servers)
        assert worker.rollout.server_handle == servers[rank]


@pytest.mark.parametrize(("treatment", "flags"), TREATMENTS)
def test_each_role_gets_its_worker_class_on_one_shared_pool(treatment, flags):
    configs = role_configs(treatment, flags)
    pool = resource_pool(GPUS, len(configs))
    # one bundle per GPU, and every role's process on it asks for 1 / roles of the GPU: all roles fit on every GPU
    assert pool.store == [GPUS] and pool.world_size == GPUS and pool.use_gpu
    assert pool.max_colocate_count == len(configs) and len(configs) * (1 / pool.max_colocate_count) == 1
    for cfg in configs.values():
        worker = worker_class(cfg)
        assert worker.cls.__ray_metadata__.modified_class.__name__ == "RoleWorker"
        assert worker.kwargs["role"] == "actor_rollout" and worker.kwargs["config"] is cfg.actor_rollout_ref  # no KL term
    kl = load_config(treatment, "paper", **flags) | {"objective": {"kl_coef": 0.001, "kl_type": "low_var_kl"}}
    (first, tree), *_ = verl_configs(kl, Path("runs/x"), GPUS).items()
    assert worker_class(compose(tree)).kwargs["role"] == "actor_rollout_ref"  # the reference comes with a KL term
