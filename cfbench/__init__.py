"""cfbench: the reference benchmark and training harness for self-evolving search agents.

Sub-packages, each importing only those listed before it:
- cfbench.tasks: shipped data (suites, corpus, training questions) and the scripts that build it
- cfbench.harness: evaluation (suite, protocol v1, agent loop, engines, retrievers, metrics, run records)
- cfbench.leaderboard: tables, statistics and the page, built from evaluation run records
- cfbench.training: core (objective, learner, data), selfevolve (proposer, MSV, CrossFit, sources),
  audit (judge, audit, replay), and the trainer and treatments on top
"""
