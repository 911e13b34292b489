"""The training core: GRPO objective, learner and checkpoints, episodes, rewards, training data."""
