"""The generated configuration composed with verl's own defaults, as `verl.trainer.main_ppo` would run it: Hydra
accepts every key (it refuses one verl does not declare) and verl's validate_config passes it."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness.errors import CfbenchError
from cfbench.training.treatments import load_config
from cfbench.training.verl_engine.launch import compose, launch
from cfbench.training.verl_engine.recipe import verl_configs


@pytest.mark.parametrize("treatment", ["search-r1", "crossfit"])
def test_every_role_composes_with_verls_defaults(treatment):
    for role, tree in verl_configs(load_config(treatment, "paper"), Path("runs/x"), 8).items():
        cfg = compose(tree)
        assert cfg.algorithm.adv_estimator == "cfbench_grpo" and cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"
        assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == tree["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"]
        assert cfg.actor_rollout_ref.rollout.n == (1 if role == "proposer" else 5)
        assert cfg.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook.endswith("advantage.register")
        assert cfg.critic.optim.lr is not None  # a key only verl's defaults set: the whole configuration is there


def test_verl_refuses_an_unknown_key_and_a_batch_the_gpus_cannot_split():
    (tree,) = verl_configs(load_config("search-r1", "paper"), Path("runs/x"), 8).values()
    with pytest.raises(Exception, match="no_such_knob"):
        compose({**tree, "trainer": {**tree["trainer"], "no_such_knob": 1}})
    (odd,) = verl_configs(load_config("search-r1", "paper"), Path("runs/x"), 7).values()
    with pytest.raises(CfbenchError, match="verl refuses the generated configuration"):
        compose(odd)


def test_dry_run_prints_the_composed_configuration():
    result = CliRunner().invoke(main, ["train", "--treatment", "search-r1", "--scale", "paper", "--engine", "verl", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "verl is not installed" not in result.output and "critic:" in result.output and "adv_estimator: cfbench_grpo" in result.output


def test_a_self_evolution_launch_refuses_more_than_one_update_per_step_before_writing(tmp_path):
    config = load_config("crossfit", "paper") | {"objective": {"updates_per_batch": 2}}
    with pytest.raises(CfbenchError, match="updates_per_batch is 2"):
        launch(config, tmp_path / "run", 8)
    assert not (tmp_path / "run").exists()
