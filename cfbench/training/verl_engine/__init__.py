"""`cfbench train --engine verl`: the GRPO treatments on verl (FSDP actor and reference, vLLM rollouts, weight sync).

cfbench keeps its treatments, typed configs and protocol-v1 turn; verl does the distributed work.
    recipe.py         a typed config -> the verl configuration it launches (pure Python: no verl import)
    launch.py         --dry-run's printout and the launch (verl imported only when a run starts)
    advantage.py      cfbench's GRPO advantage registered in verl as `cfbench_grpo` (imports verl)
    agent_loop.py     protocol v1 as a verl agent loop, on the harness's per-trajectory turn (imports verl)
  the self-evolution treatments (launch.py -> driver.py), every module importing verl:
    driver.py         cfbench's self-evolution loop (selfevolve/loop.py's Loop) over verl roles; save and resume
    roles.py          per role a worker group, role-named vLLM replicas, agent-loop workers and a weight-sync manager,
                      all roles on one resource pool of the node's GPUs
    sampling.py       a role's rollouts: wake its replicas with its weights, generate, sleep; trajectories back
    role_update.py    a role's update: log-probs, cfbench_grpo advantages, one actor step
    episode_batch.py  a role's episodes as the verl DataProto its update reads

verl is an optional dependency in its own venv (docs/training-at-scale.md, "Environment": its transformers pin excludes cfbench's): nothing
here is imported by the CPU loop, and the modules that import verl are imported only on this path.
"""
