"""The verl configuration each paper config generates (training/verl_engine/recipe.py), pinned by golden files,
and `cfbench train --engine verl --dry-run`. Needs no verl: the generator is pure Python and verl is imported
only to launch or to compose with verl's defaults (tests_verl/ runs those with verl installed).

A change to a golden file is a change to what a treatment runs on verl: regenerate with
`CFBENCH_WRITE_GOLDEN=1 python -m pytest tests/test_verl_recipe.py` and say why in docs/training-at-scale.md.
"""

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness.errors import CfbenchError
from cfbench.training.treatments import load_config
from cfbench.training.verl_engine.plan import verl_plan
from cfbench.training.verl_engine.recipe import ADVANTAGE, AGENT_LOOP, LOSS_AGGREGATION, dotlist, verl_configs

GOLDEN = Path(__file__).parent / "golden"
OUT = Path("runs/paper")


@pytest.mark.parametrize("treatment", ["search-r1", "dr-zero", "crossfit"])
def test_the_generated_verl_config_is_the_golden_one(treatment):
    text = yaml.safe_dump(verl_configs(load_config(treatment, "paper"), OUT, 8), sort_keys=False)
    golden = GOLDEN / f"verl-{treatment}.paper.yaml"
    if os.environ.get("CFBENCH_WRITE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs from the generator's output (see this module's docstring)"


def test_search_r1_paper_carries_search_r1s_recipe():
    (policy,) = verl_configs(load_config("search-r1", "paper"), OUT, 8).values()
    actor, rollout = policy["actor_rollout_ref"]["actor"], policy["actor_rollout_ref"]["rollout"]
    # train_grpo.sh: 512 prompts x 5 samples, mini-batches of 256, lr 1e-6 warmed up over 0.285 of 1005 steps, low-var KL 0.001
    assert policy["data"]["train_batch_size"] == 512 and rollout["n"] == 5 and actor["ppo_mini_batch_size"] == 256
    assert actor["optim"]["lr"] == 1e-6 and actor["optim"]["lr_warmup_steps"] == int(0.285 * 1005) == 286
    assert (actor["use_kl_loss"], actor["kl_loss_coef"], actor["kl_loss_type"]) == (True, 0.001, "low_var_kl")
    assert actor["clip_ratio"] == 0.2 and policy["trainer"]["total_training_steps"] == 1005
    # cfbench's own: its loss aggregation, its advantage, its protocol-v1 loop with at most 2 searches
    assert actor["loss_agg_mode"] == LOSS_AGGREGATION == "seq-mean-token-mean" and policy["algorithm"]["adv_estimator"] == ADVANTAGE
    assert rollout["agent"]["default_agent_loop"] == AGENT_LOOP
    assert policy["data"]["max_response_length"] == 3 * 500 + 2 * 500  # 3 generations, 2 observations


def test_self_evolution_roles_carry_dr_zeros_optimiser():
    roles = verl_configs(load_config("crossfit", "paper"), OUT, 8)
    assert list(roles) == ["proposer", "main", "aux-0", "aux-1"]
    for name, role in roles.items():
        actor = role["actor_rollout_ref"]["actor"]
        # Dr. Zero's scripts: 256 prompts a batch and a mini-batch, grad clip 0.1, lr 1e-6, 3% warmup, no KL loss
        assert role["data"]["train_batch_size"] == actor["ppo_mini_batch_size"] == 256
        assert actor["optim"]["clip_grad"] == 0.1 and actor["optim"]["lr"] == 1e-6 and actor["use_kl_loss"] is False
        assert actor["optim"]["lr_warmup_steps"] == int(0.03 * role["trainer"]["total_training_steps"])
        assert role["actor_rollout_ref"]["rollout"]["n"] == (1 if name == "proposer" else 5)  # the proposer: one sample per task
    assert [r["trainer"]["total_training_steps"] for r in roles.values()] == [3 * 18, 3 * 25, 3 * 25, 3 * 25]
    assert {r["actor_rollout_ref"]["model"]["path"] for r in roles.values()} == {"Qwen/Qwen3.5-4B"}
    own = verl_configs(load_config("crossfit", "paper") | {"proposer_model": "/ckpt/proposer-start"}, OUT, 8)
    assert [r["actor_rollout_ref"]["model"]["path"] for r in own.values()] == ["/ckpt/proposer-start", *["Qwen/Qwen3.5-4B"] * 3]
    cooler = verl_configs(load_config("crossfit", "paper") | {"proposer_temperature": 0.5}, OUT, 8)  # the proposer's alone
    assert [r["actor_rollout_ref"]["rollout"]["temperature"] for r in cooler.values()] == [0.5, 1.0, 1.0, 1.0]


def test_dotlist_is_hydras_command_line_form():
    assert dotlist({"a": {"b": True, "c": [1, "x"]}, "d": "two words", "e": 1e-6}) == ["a.b=true", "a.c=[1,x]", "d='two words'", "e=1e-06"]


@pytest.mark.parametrize("treatment", ["search-r1", "crossfit"])
def test_dry_run_prints_every_setting_and_exits_0(treatment):
    result = CliRunner().invoke(main, ["train", "--treatment", treatment, "--scale", "paper", "--engine", "verl", "--dry-run"])
    assert result.exit_code == 0, result.output
    for tree in verl_configs(load_config(treatment, "paper"), Path("OUT"), 8).values():
        for override in dotlist(tree):
            assert f"#   {override} \\" in result.output


def test_the_verl_path_refuses_what_it_cannot_run(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["train", "--treatment", "search-r1", "--scale", "paper", "--dry-run"])
    assert result.exit_code == 2 and "add --engine verl" in result.output
    result = runner.invoke(main, ["train", "--treatment", "base", "--scale", "paper", "--engine", "verl", "--dry-run"])
    assert result.exit_code == 2 and "not 'base'" in result.output
    out = tmp_path / "run"
    result = runner.invoke(main, ["train", "--treatment", "crossfit", "--scale", "paper", "--engine", "verl", "--out", str(out)])
    assert result.exit_code == 2 and "needs verl" in result.output and not out.exists()  # this venv has none (tests_verl/ has)
    with pytest.raises(CfbenchError, match="lora section"):
        verl_configs(load_config("search-r1", "cpu"), OUT, 8)


def test_plan_in_verls_layout_counts_one_role_and_vllms_share():
    lines = verl_plan(load_config("search-r1", "paper"), 8, 80)
    # Qwen3.5-4B (4.08 B parameters): vLLM's 0.6 x 80 GB less 8.2 GB of bf16 weights; 16 bytes/parameter / 8 GPUs
    assert "vLLM holds 0.6 x 80 GB = 48.0 GB: weights 8.2 GB, cache room 39.8 GB" in lines[1]
    assert "training state 8.2 + reference 1.0" in lines[2] and lines[-1].startswith("fits")
    crossfit = verl_plan(load_config("crossfit", "paper"), 8, 80)
    assert "reference" not in crossfit[2] and "training state 8.2 +" in crossfit[2]  # one role at a time, no KL term
    with pytest.raises(CfbenchError, match="change knob micro_batch"):
        verl_plan(load_config("search-r1", "paper"), 8, 24)
    with pytest.raises(CfbenchError, match="leaves no room for one 4596-token row"):
        verl_plan(load_config("search-r1", "paper") | {"model": "Qwen/Qwen3.5-9B"}, 8, 24)
    result = CliRunner().invoke(main, ["train", "--treatment", "search-r1", "--scale", "paper", "--plan", "--engine", "verl"])
    assert result.exit_code == 0 and result.output.splitlines() == lines
