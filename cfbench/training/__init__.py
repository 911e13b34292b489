"""Training: `core` (objective, learner, episodes, data), `selfevolve` (proposer, MSV, CrossFit,
sources, the self-evolution loop) and `audit` (judge, audit, replay); trainer.py and treatments.py
on top dispatch a treatment to them."""
