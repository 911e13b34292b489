"""A GRPO treatment's typed config -> the verl configuration (`verl.trainer.main_ppo`'s keys) that runs it.

Every value comes from a knob of the treatment's config (training/config/classes.py) or from one of the
constants below, each with its source; none is typed into a launch script. What each knob becomes:

    prompts_per_step                 data.train_batch_size
    samples_per_prompt               actor_rollout_ref.rollout.n (the proposer samples once per task: its group
                                     is the step's tasks of one hop count, as Dr. Zero's HRPO)
    objective.updates_per_batch      ppo_mini_batch_size = prompts_per_step / updates_per_batch, mini-batches in order
    objective.clip_eps               clip_ratio (low and high)
    objective.kl_coef, kl_type       use_kl_loss, kl_loss_coef, kl_loss_type (a loss term, not a reward penalty)
    learning_rate, weight_decay      actor.optim
    warmup_steps / warmup_ratio      actor.optim.lr_warmup_steps: the config's own count over the role's updates
    max_grad_norm                    actor.optim.clip_grad
    micro_batch                      ppo_micro_batch_size_per_gpu and both log-prob micro-batches
    gradient_checkpointing           model.enable_gradient_checkpointing
    logprob_chunk                    model.use_fused_kernels (verl's chunked head + log-prob; its own chunk size)
    sharding "fsdp", bf16            actor strategy fsdp2 (FSDP2, as core/sharding.py), bf16 compute over fp32 weights
    temperature, seed                rollout.temperature, and the seed of the data order, rollouts and FSDP
    knobs                            the agent loop's (agent_loop.py) protocol-v1 budget; prompt_length
                                     max_context_tokens (what generation sees), response_length every turn and
                                     observation at their caps, vLLM's max_model_len the context plus one turn
    steps / a role's updates         trainer.total_training_steps; save_every trainer.save_freq

The loss keeps cfbench's aggregation (token mean per episode, then mean over episodes: verl's
`seq-mean-token-mean`) and its advantage (`cfbench_grpo`, advantage.py); docs/training-at-scale.md
lists where this differs from the upstream scripts and why.
"""

from __future__ import annotations

from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.training.config.classes import RLConfig, SearchR1Config, SelfEvolutionConfig
from cfbench.training.selfevolve.crossfit import solvers

AGENT_LOOP = "cfbench_protocol_v1"  # agent_loop.py registers it under this name
ADVANTAGE = "cfbench_grpo"  # advantage.py
LOSS_AGGREGATION = "seq-mean-token-mean"  # cfbench's objective (core/objective.py), verl's name for it
# Rollout memory: Search-R1's train_grpo.sh gives vLLM 0.6 of each GPU with the actor, optimizer and
# reference offloaded to CPU during rollouts (its fsdp_config offloads); Dr. Zero's solver script 0.5.
ROLLOUT_MEMORY = {"search-r1": 0.6, "self-evolution": 0.5}
OFFLOAD = True  # both upstream recipes offload parameters and optimizer state while vLLM samples
AGENT_WORKERS = 8  # verl's default: agent-loop worker processes per run
# Run in every Ray worker (the trainer computes advantages in one): registers cfbench_grpo. A key verl's config
# does not declare, so Hydra takes it with a leading `+`.
SETUP_HOOK = "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=cfbench.training.verl_engine.advantage.register"


def refuse_unsupported(config: RLConfig) -> None:
    """One-line refusals for what the verl path does not carry over (it trains every weight, on its own vLLM)."""
    if config.lora is not None:
        raise CfbenchError(
            f"--engine verl trains every weight, as the paper configs do; {config.treatment} {config.scale} has a lora section"
        )
    if config.rollout_server is not None:
        raise CfbenchError("--engine verl samples on its own vLLM replicas; drop --rollout-server")


def role_steps(config: RLConfig) -> dict[str, int]:
    """Updates each trained role takes in the run: Search-R1's policy every step; self-evolution's roles their share."""
    if isinstance(config, SearchR1Config):
        return {"policy": config.steps}
    names = ["proposer", *solvers(bool(config.crossfit), config.control)]
    return {name: config.updates_of(name if name in ("proposer", "main") else "aux") for name in names}


def rollout_memory(config: RLConfig) -> float:
    """The share of each GPU vLLM takes while it samples (verl's rollout.gpu_memory_utilization)."""
    return ROLLOUT_MEMORY["self-evolution" if isinstance(config, SelfEvolutionConfig) else "search-r1"]


def response_length(config: RLConfig) -> int:
    """Tokens after the prompt at most: every turn's generation and every observation at their caps (an
    invalid-action note is shorter than an observation's cap)."""
    k = config.knobs
    return (k.max_searches + 1) * k.max_new_tokens + k.max_searches * k.max_obs_tokens


def verl_configs(config: RLConfig, out: Path, gpus: int) -> dict[str, dict]:
    """role -> the nested verl configuration that trains it (verl's defaults fill every key not named here)."""
    refuse_unsupported(config)
    return {role: _role_config(config, role, updates, out, gpus) for role, updates in role_steps(config).items()}


def _role_config(config: RLConfig, role: str, updates: int, out: Path, gpus: int) -> dict:
    config = config.for_role(role)
    k, o = config.knobs, config.objective
    fsdp = {
        "param_offload": OFFLOAD,
        "optimizer_offload": OFFLOAD,
        "model_dtype": "fp32",  # master weights; FSDP's mixed precision computes in bf16 (config.bf16)
        "seed": config.seed,
    }
    per_gpu = config.micro_batch
    samples = 1 if role == "proposer" else config.samples_per_prompt
    run = out / "verl" / role
    return {
        "data": {
            "train_files": str(run / "train.parquet"),
            "val_files": str(run / "train.parquet"),  # verl wants a validation file; validation is off (test_freq -1)
            "train_batch_size": config.prompts_per_step,
            "max_prompt_length": k.max_context_tokens,
            "max_response_length": response_length(config),
            "return_raw_chat": True,
            "shuffle": False,  # the parquet is written in cfbench's order (its seeded shuffle), one step's prompts a batch
            "seed": config.seed,
            "filter_overlong_prompts": False,
            "truncation": "left",  # as the protocol cuts a long context
        },
        "algorithm": {
            "adv_estimator": ADVANTAGE,
            "norm_adv_by_std_in_grpo": True,
            "use_kl_in_reward": False,
        },
        "actor_rollout_ref": {
            "hybrid_engine": True,
            "model": {
                "path": config.start_model(role),
                "enable_gradient_checkpointing": config.gradient_checkpointing,
                "use_remove_padding": True,
                # logprob_chunk: log-probs without the whole [tokens, vocabulary] logits (a 248k vocabulary's are the
                # update's largest tensor, --plan): verl's fused head + log-prob, its torch implementation chunked
                "use_fused_kernels": config.logprob_chunk is not None,
            },
            "actor": {
                "strategy": "fsdp2" if config.sharding == "fsdp" else "fsdp",
                "ppo_mini_batch_size": config.prompts_per_step // o.updates_per_batch,
                "ppo_micro_batch_size_per_gpu": per_gpu,
                "ppo_epochs": 1,
                "shuffle": False,
                "data_loader_seed": config.seed,
                "clip_ratio": o.clip_eps,
                "clip_ratio_low": o.clip_eps,
                "clip_ratio_high": o.clip_eps,
                "loss_agg_mode": LOSS_AGGREGATION,
                "entropy_coeff": 0,
                "use_kl_loss": o.kl_coef > 0,
                "kl_loss_coef": o.kl_coef,
                "kl_loss_type": o.kl_type,
                "optim": {
                    "lr": config.learning_rate,
                    "lr_warmup_steps": config.warmup(updates),
                    "lr_scheduler_type": "constant",  # constant after the linear warmup, as core/learner.py
                    "weight_decay": config.weight_decay,
                    "clip_grad": config.max_grad_norm,
                    "total_training_steps": updates,
                },
                "fsdp_config": {**fsdp, "dtype": "bfloat16" if config.bf16 else "float32"},
            },
            "ref": {
                "log_prob_micro_batch_size_per_gpu": per_gpu,
                "fsdp_config": {"param_offload": OFFLOAD, "seed": config.seed},
            },
            "rollout": {
                "name": "vllm",
                "mode": "async",
                "n": samples,
                "temperature": config.temperature,
                "top_p": 1.0,
                "top_k": -1,
                "seed": config.seed,
                "calculate_log_probs": True,  # the sampler's log-probs go to the update, as cfbench's engines return them
                "tensor_model_parallel_size": 1,
                "gpu_memory_utilization": rollout_memory(config),
                "max_model_len": k.max_context_tokens + k.max_new_tokens,
                "log_prob_micro_batch_size_per_gpu": per_gpu,
                "agent": {
                    "num_workers": AGENT_WORKERS,
                    "default_agent_loop": AGENT_LOOP,
                    "agent_loop_config_path": str(run / "agent_loops.yaml"),
                },
            },
        },
        "trainer": {
            "project_name": "cfbench",
            "experiment_name": f"{config.treatment}-{config.scale}-{role}",
            "logger": ["console"],
            "n_gpus_per_node": gpus,
            "nnodes": 1,
            "total_epochs": 1,
            "total_training_steps": updates,
            "save_freq": config.save_every,
            "test_freq": -1,
            "val_before_train": False,
            "default_local_dir": str(run / "checkpoints"),
            "resume_mode": "auto",
        },
    }


def dotlist(tree: dict, prefix: str = "") -> list[str]:
    """Hydra's command-line form (`a.b=value`) of a nested config, one override per leaf, in the tree's order."""
    out = []
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += dotlist(value, name + ".")
        else:
            out.append(f"{name}={_hydra_value(value)}")
    return out


def _hydra_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, str):
        return repr(value) if any(c in value for c in " ,=[]") else value
    return repr(value)
