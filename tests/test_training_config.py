"""Typed training configs: the shipped files round-trip byte for byte, bad files fail in one line naming the
file, key and value, run records written before the recipe knobs existed still resume, and the paper
recipes carry the upstream settings."""

import json
import subprocess
import sys

import pytest

from cfbench.harness.errors import CfbenchError
from cfbench.training.config.classes import SearchR1Config, SelfEvolutionConfig, WarmStartConfig
from cfbench.training.config.schema import config_text, parse, to_json
from cfbench.training.trainer import check_config
from cfbench.training.treatments import CONFIGS, config_file, load_config

FAMILY = {
    "base": "base",
    "search-r1": "search-r1",
    "self-evolution": "dr-zero",
    "warm-start": "warm-start",
    "warm-start-proposer": "warm-start-proposer",
}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.name)
def test_every_shipped_config_is_written_back_byte_for_byte(path):
    config = config_file(path, FAMILY[path.name.split(".")[0]])
    assert config_text(config) == path.read_text()
    assert parse(type(config), json.loads(config_text(config)), "again") == config


@pytest.mark.parametrize(
    "change, message",
    [
        ({"lerning_rate": 0.1}, "x.json: unknown key 'lerning_rate'; did you mean 'learning_rate'? remove or rename it"),
        ({"objective": {"kl_cof": 0.1}}, "x.json: unknown key 'objective.kl_cof'; did you mean 'objective.kl_coef'?"),
        ({"learning_rate": 2}, "x.json: knob learning_rate must be a number in (0, 1), got 2"),
        ({"objective": {"kl_type": "k2"}}, "x.json: knob objective.kl_type must be one of kl, low_var_kl, got 'k2'"),
        ({"objective": {"updates_per_batch": 3}}, "knob objective.updates_per_batch must be a divisor of prompts_per_step (1)"),
        ({"warmup_ratio": 0.1, "warmup_steps": 5}, "x.json: knobs warmup_steps (5) and warmup_ratio (0.1) are both set"),
        ({"max_grad_norm": 0}, "x.json: knob max_grad_norm must be a number > 0, got 0"),
        ({"sources": []}, "x.json: knob sources must be a non-empty list of source names, got []"),
        ({"knobs": {"topk": 0}}, "x.json: knob topk must be an integer >= 1, got 0"),
        ({"reward": "em"}, "x.json: reward must be a JSON object, got 'em'"),
    ],
)
def test_a_bad_config_is_one_line_naming_file_key_and_value(change, message):
    data = to_json(load_config("search-r1", "cpu-smoke")) | change
    with pytest.raises(CfbenchError) as raised:
        parse(SearchR1Config, data, "x.json")
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_missing_keys_and_the_other_treatments_sections_are_named():
    data = to_json(load_config("warm-start", "cpu-smoke"))
    with pytest.raises(CfbenchError, match="w.json: missing key 'epochs'; add it"):
        parse(WarmStartConfig, {k: v for k, v in data.items() if k != "epochs"}, "w.json")
    with pytest.raises(CfbenchError, match=r"w.json: unknown key 'mix.two_hop'; did you mean 'mix.two-hop'\?"):
        parse(WarmStartConfig, data | {"mix": {"two_hop": 3}}, "w.json")
    with pytest.raises(CfbenchError, match=r"w.json: knob lora.dropout must be a number in \[0, 1\), got 1"):
        parse(WarmStartConfig, data | {"lora": data["lora"] | {"dropout": 1}}, "w.json")
    with pytest.raises(CfbenchError, match="knob hop_weights must be 4 non-negative weights"):
        load_config("dr-zero", "cpu-smoke") | {"hop_weights": [1, 1]}
    refused = r"knob proposer_temperature must be a number in \(0, 2\] \(rollouts are sampled\) \(or absent\), got 0$"
    with pytest.raises(CfbenchError, match=refused):
        load_config("dr-zero", "cpu-smoke") | {"proposer_temperature": 0}


def test_a_run_recorded_before_the_recipe_knobs_still_resumes_and_a_changed_recipe_is_refused(tmp_path):
    config = load_config("search-r1", "cpu-smoke")
    recorded = to_json(config)
    assert "objective" not in recorded and "warmup_ratio" not in recorded  # at their defaults: written as runs always were
    (tmp_path / "config.json").write_text(json.dumps(recorded, sort_keys=True) + "\n")
    check_config(config, tmp_path, resume=True)  # no error
    check_config(config | {"steps": 80}, tmp_path, resume=True)  # --steps may extend a run
    with pytest.raises(CfbenchError, match=r"--resume: knob objective was None in .*config.json, now \{'kl_coef': 0.001"):
        check_config(config | {"objective": {"kl_coef": 0.001}}, tmp_path, resume=True)
    (tmp_path / "config.json").write_text(json.dumps(recorded | {"clip": 0.2}))
    with pytest.raises(CfbenchError, match="config.json: unknown key 'clip'"):
        check_config(config, tmp_path, resume=True)


def test_the_paper_recipes_carry_the_upstream_settings():
    r1 = load_config("search-r1", "paper")
    assert (r1.objective.kl_type, r1.objective.kl_coef, r1.objective.clip_eps, r1.objective.updates_per_batch) == (
        "low_var_kl",
        0.001,
        0.2,
        2,
    )
    assert r1.knobs.max_searches == 2 and r1.warmup_steps == 286 and r1.learning_rate == 1e-6  # max_turns=2, ratio 0.285 of 1005
    zero = load_config("dr-zero", "paper")
    assert isinstance(zero, SelfEvolutionConfig) and (zero.max_grad_norm, zero.warmup_ratio, zero.warmup_steps) == (0.1, 0.03, 0)
    for treatment in ("search-r1", "dr-zero"):  # the cpu-smoke scale keeps the plain objective (the resume tests' numbers)
        smoke = load_config(treatment, "cpu-smoke")
        assert (smoke.objective.kl_coef, smoke.objective.updates_per_batch, smoke.warmup_ratio) == (0.0, 1, 0.0)


def test_the_configuration_imports_none_of_the_code_it_configures():
    """config/ owns its constants (config/choices.py): importing the config classes loads no self-evolution module, so
    selfevolve/ (whose sources.py reads the config) can import the config without a circle."""
    code = "import sys, cfbench.training.config.classes; print([m for m in sys.modules if m.startswith('cfbench.training.selfevolve')])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


@pytest.mark.parametrize("treatment", ["search-r1", "dr-zero", "msv", "crossfit", "msv-crossfit"])
def test_the_cpu_recipe_is_one_with_signal(treatment):
    """Issue 35's recipe: groups that can differ, observations that show all top-3 passages, no empty updates, no warmup."""
    config = load_config(treatment, "cpu")
    assert config.prompts_per_step >= 4 and config.samples_per_prompt >= 2
    assert config.knobs.max_obs_tokens >= 500 and config.knobs.topk == 3
    assert config.skip_empty_updates and config.objective.kl_coef == 0
    assert config.warmup(config.steps or 75) == 0
    if treatment == "search-r1":
        assert config.train_set == "search-r1-answerable"


def test_a_proposer_model_that_cannot_be_loaded_is_refused_before_the_run_directory_is_made(tmp_path):
    config = load_config("dr-zero", "cpu-smoke") | {"proposer_model": str(tmp_path / "no-such-start")}
    with pytest.raises(CfbenchError, match=r"checkpoint '.*no-such-start' not found: no such directory"):
        check_config(config, tmp_path / "run", resume=False)
    assert not (tmp_path / "run").exists()
    check_config(config | {"proposer_model": "smollm2-135m-propose"}, tmp_path / "run", resume=False)  # a bundled start passes


def test_set_changes_one_knob_keeps_its_section_and_is_checked_like_a_file():
    config = load_config("search-r1", "cpu", settings=("learning_rate=1e-3", "knobs.max_obs_tokens=400", "reward.kind=em+format"))
    shipped = load_config("search-r1", "cpu")
    assert (config.learning_rate, config.knobs.max_obs_tokens, config.reward.kind) == (1e-3, 400, "em+format")
    assert config.knobs.topk == shipped.knobs.topk and config.steps == shipped.steps  # siblings and other knobs as shipped
    assert load_config("dr-zero", "cpu", settings=("objective.clip_eps=0.3",)).objective.clip_eps == 0.3  # a section left out of the file
    with pytest.raises(CfbenchError, match="learning_rate is set twice"):
        load_config("search-r1", "cpu", settings=("learning_rate=1e-3", "learning_rate=5e-4"))
    for item, message in [
        ("learning_rat=1e-3", "--set learning_rat=1e-3: unknown key 'learning_rat'; did you mean 'learning_rate'?"),
        ("knobs.max_obs_token=400", "unknown key 'knobs.max_obs_token'; did you mean 'knobs.max_obs_tokens'?"),
        ("learning_rate=-1", "learning_rate"),
        ("learning_rate.x=1", "learning_rate is no section"),
        ("learning_rate", "write KEY=VALUE"),
        ("steps=3", "steps has its own option (--steps)"),
        ("learning_rate=Infinity", "not a finite number"),
    ]:
        with pytest.raises(CfbenchError, match=message.replace(".", r"\.").replace("?", r"\?").replace("(", r"\(").replace(")", r"\)")):
            load_config("search-r1", "cpu", settings=(item,))


def test_a_run_started_with_set_resumes_only_with_the_same_setting(tmp_path):
    pilot = load_config("search-r1", "cpu", settings=("learning_rate=1e-3",))
    (tmp_path / "config.json").write_text(config_text(pilot))
    check_config(pilot, tmp_path, resume=True)
    with pytest.raises(CfbenchError, match=r"knob learning_rate was 0\.001 .* now 0\.0002; .*the options and --set it was started with"):
        check_config(load_config("search-r1", "cpu"), tmp_path, resume=True)
