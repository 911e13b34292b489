"""The self-evolution roles as verl worker groups sharing one node's GPUs (driver.py drives them).

One `RayResourcePool` holds the node's GPUs, one bundle each. Every role has, on that pool:
    workers      a `RayWorkerGroup` of `RoleWorker` (verl's ActorRolloutRefWorker: the FSDP actor and the vLLM
                 adapter of its rollout), one process per GPU asking for 1/roles of it, so all roles fit on every
                 GPU and share its memory in time: an idle role keeps parameters and optimizer offloaded
                 (recipe.OFFLOAD) and its vLLM asleep;
    servers      its vLLM replicas (verl's `LLMServerManager`, hybrid: on its own processes' GPUs);
    agent_loops  verl's `AgentLoopManager`, its workers running protocol v1 (`cfbench_protocol_v1`, agent_loop.py)
                 against those replicas; no reward loop (rewards are cfbench's, computed by its loop);
    checkpoints  verl's `CheckpointEngineManager`, which wakes the replicas and pushes the role's weights into them.

Two hybrid roles in one Ray job collide on actor names (docs/training-at-scale.md): vLLMReplica names its server
`vllm_server_{replica}_{node}` and the worker-side adapter looks it up by that name. Here each role's replicas get
`name_suffix=<role>`, vLLMReplica's own parameter (`RoleServers`), and each role's workers are handed their own
replica's server handle (`RoleWorker.bind_rollout_servers`) before anything asks for it, so no lookup by name
happens. Worker groups take the role as their name prefix; agent-loop workers carry verl's random suffix; no
reward-loop workers (`reward_loop_worker_{i}`) are made. Imports verl (this path only).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ray
from omegaconf import DictConfig
from verl.checkpoint_engine import CheckpointEngineManager
from verl.experimental.agent_loop import AgentLoopManager
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.trainer.ppo.utils import Role, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.rollout.llm_server import LLMServerManager
from verl.workers.rollout.replica import get_rollout_replica_class

POOL = "cfbench_roles"
# Weight sync between a role's FSDP actor and its vLLM in the same processes, as verl's own trainer sets it
# (trainer/ppo/v1/trainer_base.py: checkpoint_engine_config.backend = "naive").
SYNC = "naive"


class RoleWorker(ActorRolloutRefWorker):
    """verl's hybrid worker, plus the call that binds its rollout adapter to its own role's vLLM server."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def bind_rollout_servers(self, servers: dict[int, object]) -> None:
        """`servers`: replica rank -> the server the adapter of that replica talks to (its first node's).
        The adapter looks a server up by name only while it holds none (vllm_rollout.py `_ensure_server_handle`)."""
        self.rollout.server_handle = servers[self.rollout.replica_rank]


class RoleServers(LLMServerManager):
    """verl's LLM server manager for one role: its vLLM replicas named with the role as their suffix."""

    def __init__(self, *args, role: str, **kwargs) -> None:
        rollout = kwargs["config"].actor_rollout_ref.rollout
        # LLMServerManager keeps a rollout_replica_class set before its __init__ ("for recipe to change")
        self.rollout_replica_class = functools.partial(get_rollout_replica_class(rollout.name), name_suffix=role)
        super().__init__(*args, **kwargs)


def resource_pool(gpus: int, roles: int) -> RayResourcePool:
    """The node's GPUs, each shared by one process of every role (a worker asks for 1 / max_colocate_count GPU)."""
    return RayResourcePool(process_on_nodes=[gpus], use_gpu=True, max_colocate_count=roles, name_prefix=POOL)


def worker_class(config: DictConfig) -> RayClassWithInitArgs:
    """A role's worker: actor and rollout, plus the reference when its config has a KL term (verl's own choice)."""
    role = Role.ActorRolloutRef if need_reference_policy(config) else Role.ActorRollout
    return RayClassWithInitArgs(cls=ray.remote(RoleWorker), config=config.actor_rollout_ref, role=str(role))


@dataclass
class VerlRole:
    """One trained role's verl pieces (module docstring); driver.py and role_update.py call them."""

    name: str
    config: DictConfig  # its composed ppo_trainer configuration (launch.compose)
    workers: RayWorkerGroup
    agent_loops: AgentLoopManager
    checkpoints: CheckpointEngineManager


def start(configs: dict[str, DictConfig], gpus: int) -> dict[str, VerlRole]:
    """Every role's worker group (models first, so each vLLM sizes its cache with the actors offloaded), then each
    role's servers, bound to its workers and put to sleep before the next role's start."""
    pool = resource_pool(gpus, len(configs))
    groups = {
        name: RayWorkerGroup(
            resource_pool=pool, ray_cls_with_init=worker_class(cfg), name_prefix=f"{name}_", device_name=cfg.trainer.device
        )
        for name, cfg in configs.items()
    }
    for group in groups.values():
        group.init_model()
    roles = {}
    for name, cfg in configs.items():
        servers = RoleServers.create(config=cfg, worker_group=groups[name], rollout_resource_pool=pool, role=name)
        groups[name].bind_rollout_servers({r.replica_rank: r.server_handle for r in servers.get_replicas()})
        sync = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)
        sync.backend = SYNC
        checkpoints = CheckpointEngineManager(config=sync, actor_wg=groups[name], replicas=servers.get_replicas())
        checkpoints.sleep_replicas()
        agent_loops = AgentLoopManager.create(config=cfg, llm_client=servers.get_client())
        roles[name] = VerlRole(name, cfg, groups[name], agent_loops, checkpoints)
    return roles
