"""`cfbench train --engine verl`: the GRPO treatments on verl (FSDP actor and reference, vLLM rollouts, weight sync).

cfbench keeps its treatments, typed configs and protocol-v1 turn; verl does the distributed work.
    recipe.py      a typed config -> the verl configuration it launches (pure Python: no verl import)
    launch.py      --dry-run's printout and the launch (verl imported only when a run starts)
    advantage.py   cfbench's GRPO advantage registered in verl as `cfbench_grpo` (imports verl)
    agent_loop.py  protocol v1 as a verl agent loop, on the harness's per-trajectory turn (imports verl)

verl is an optional dependency in its own venv (docs/training-at-scale.md, "Environment": its transformers pin excludes cfbench's): nothing
here is imported by the CPU loop, and the modules that import verl are imported only on this path.
"""
