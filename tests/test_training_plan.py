"""`cfbench train --plan`: per-GPU memory against a hand estimate, refusal of a run that cannot fit, and the schedule,
time and launch command of every scale."""

import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness.errors import CfbenchError
from cfbench.training.config.classes import read_run_config
from cfbench.training.plan import (
    CPU_SECONDS_PER_ROLLOUT,
    MEASURED_PARAMS,
    MEASURED_ROLLOUTS,
    SHAPES,
    estimate,
    phase_steps,
    phases,
    plan,
    shape_of,
)
from cfbench.training.treatments import load_config

GB = 1e9


def test_4b_search_r1_on_8_x_80_gb_matches_a_hand_estimate():
    """Hand estimate, Qwen3.5-4B taken as its advertised 4.0 B text parameters (not the module's own count):

    training state, ZeRO-3 over 8 GPUs, bf16 + fp32 master/Adam: 16 B x 4.0e9 / 8           =  8.0 GB
      of which gradients 2 B x 4.0e9 / 8 = 1.0 GB (held only during the update)
    frozen reference of the KL term (kl_coef 0.001), bf16, sharded: 2 B x 4.0e9 / 8          =  1.0 GB
    activations, checkpointed: 32 layers x 8 rows x 4096 tok x 2560 hidden x 2 B            =  5.4 GB
      + one layer recomputed, 8 x 4096 x (16 x 2560 + 8 x 9216) B                           =  3.8 GB
    log-probs in 1024-token chunks: 1024 x 248320 vocab x 10 B                              =  2.5 GB
    update peak: 8.0 + 1.0 + 5.4 + 3.8 + 2.5                                                = 20.7 GB
    rollout rows per GPU: 512 prompts x 5 samples / 8 = 320, each up to 4096 tokens
    K/V: 320 x 4096 x (2 x 8 attention layers x 4 kv heads x 256 x 2 B = 32 KiB)            = 42.9 GB
    DeltaNet state: 320 x 24 layers x 32 heads x 128 x 128 x 2 B                            =  8.1 GB
    sampler weights, bf16, whole: 2 B x 4.0e9                                               =  8.0 GB
    rollout peak: (8.0 - 1.0) + 1.0 + 8.0 + 42.9 + 8.1                                      = 67.0 GB  < 72 GB usable
    """
    config = load_config("search-r1", "paper")
    terms = estimate(config, SHAPES["Qwen/Qwen3.5-4B"], gpus=8, sharded=True, precision="bf16")
    peaks = phases(terms, checkpointing=True, chunked=True)
    assert peaks["update"] / GB == pytest.approx(20.7, rel=0.10)
    assert peaks["rollout"] / GB == pytest.approx(67.0, rel=0.10)
    assert terms["frozen reference"] / GB == pytest.approx(1.0, rel=0.10)
    assert terms["rollout KV cache"] / GB == pytest.approx(42.9, rel=0.10)
    # replicated, the training state alone is 16 B x 4.0e9 = 64 GB per GPU and the fp32 reference 16 GB more:
    # the trainer's layout today cannot hold a step
    replicated = phases(estimate(config, SHAPES["Qwen/Qwen3.5-4B"], gpus=8, sharded=False, precision="fp32"), True, True)
    assert replicated["update"] / GB == pytest.approx(64 + 16 + 2 * 9.2 + 2.5, rel=0.10)  # fp32 activations are twice the bf16 ones


def test_plan_prints_the_table_and_accepts_a_run_that_fits():
    args = ["train", "--treatment", "search-r1", "--scale", "paper", "--plan", "--gpus", "8", "--gpu-memory", "80"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "rollout KV cache" in result.output and "sharded bf16" in result.output
    assert result.output.strip().splitlines()[-1].startswith("fits: sharded bf16")


@pytest.mark.parametrize(
    "treatment, gpus, memory, knob",
    [
        ("crossfit", 1, 80, "--gpus"),  # four roles' training state on one GPU
        ("search-r1", 8, 24, "rollout_rows"),  # 320 rows of 4k-token K/V per GPU
    ],
)
def test_a_run_that_cannot_fit_is_refused_naming_the_knob(treatment, gpus, memory, knob):
    result = CliRunner().invoke(
        main, ["train", "--treatment", treatment, "--scale", "paper", "--plan", "--gpus", str(gpus), "--gpu-memory", str(memory)]
    )
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "does not fit" in lines[0] and f"change {knob}" in lines[0].replace("knob ", "")


def test_plan_refuses_a_model_it_has_no_shape_for_and_says_how_to_get_it():
    with pytest.raises(CfbenchError) as refused:
        plan(load_config("search-r1", "paper") | {"model": "example-org/no-such-model"}, 8, 80)
    message = str(refused.value)
    assert "huggingface-cli download example-org/no-such-model config.json" in message and "plan.py" not in message


@pytest.mark.parametrize("treatment", ["search-r1", "dr-zero", "crossfit"])
@pytest.mark.parametrize("scale", ["cpu-smoke", "cpu", "paper"])
def test_every_scale_gets_a_plan_with_steps_tokens_time_and_launch_command(treatment, scale):
    result = CliRunner().invoke(main, ["train", "--treatment", treatment, "--scale", scale, "--plan"], terminal_width=300)
    assert result.exit_code == 0, result.output
    text = result.output
    config = load_config(treatment, scale)
    steps = config.steps if config.steps is not None else config.scheduled_steps
    assert f"schedule: {steps} steps" in text and f"{config.samples_per_prompt} samples" in text
    assert "rollout tokens: at most" in text and "time: about" in text and "plan.py" not in text
    [launch] = [line for line in text.splitlines() if line.startswith("launch: ")]
    assert f"train --treatment {treatment} --scale {scale} --out runs/{treatment}-{scale}" in launch
    if scale == "paper":
        assert launch.startswith("launch: accelerate launch --config_file cfbench/training/configs/accelerate-ddp.yaml --num_processes 8")
        assert text.strip().splitlines()[-1].startswith("fits: sharded bf16") and " h on 8 GPUs" in text
    else:
        assert launch.startswith("launch: cfbench train") and "CPU-hours" in text and "GB per GPU" not in text
        assert "shape from " in text and "config.json" in text  # read from the bundled model, not a table


def test_the_shape_read_from_config_json_is_smollm2s_own_count():
    """SmolLM2-135M: 30 layers x (576 x (576 + 2 x 192) q, k, v + 576 x 576 o + 3 x 576 x 1536 mlp) + 49152 x 576 tied
    embeddings = 134,479,872 (its 134.5 M less the norms)."""
    shape, source = shape_of("smollm2-135m-search")
    assert source.endswith("smollm2-135m/config.json") and not shape.query_gate and shape.tied
    assert shape.params == 30 * (576 * (576 + 2 * 192) + 576 * 576 + 3 * 576 * 1536) + 49152 * 576 == MEASURED_PARAMS


def test_the_cpu_costs_are_the_studys_measured_steps():
    """The constants the CPU estimates scale, read back from the committed metrics of the 135M study (cpu_s per step)."""
    study = Path(__file__).resolve().parents[1] / "leaderboards" / "fixed1325" / "study"

    def rows(treatment):
        return [json.loads(line) for line in (study / treatment / "metrics.jsonl").read_text().splitlines()]

    search_r1 = [r["cpu_s"] for r in rows("search-r1")]
    proposer = [r["cpu_s"] for r in rows("dr-zero") if r["phase"] == "proposer"]
    training_solver = [r["cpu_s"] for r in rows("dr-zero") if r["phase"] == "solver" and r["admitted"]]
    measured = {"policy": statistics.mean(search_r1), "proposer": statistics.median(proposer), "solver": statistics.mean(training_solver)}
    for phase, cpu_s in measured.items():
        assert CPU_SECONDS_PER_ROLLOUT[phase] * MEASURED_ROLLOUTS == pytest.approx(cpu_s, rel=0.02), phase
    config = read_run_config(study / "search-r1" / "config.json")  # the measured run's own config: the estimate is its measured total
    assert config.prompts_per_step * config.samples_per_prompt == MEASURED_ROLLOUTS
    [time] = [line for line in plan(config, 8, 80) if line.startswith("time:")]
    assert time.startswith(f"time: about {sum(search_r1) / 3600:.2f} CPU-hours")


def test_steps_cut_a_self_evolution_schedule_in_its_order():
    config = load_config("dr-zero", "cpu", steps=40)  # round 1: 18 proposer + 22 of its 25 solver steps
    assert phase_steps(config) == {"proposer": 18, "solver": 22}
    assert phase_steps(load_config("dr-zero", "cpu")) == {"proposer": 54, "solver": 75}


def test_the_launch_command_repeats_the_options_that_change_the_run():
    args = ["train", "--treatment", "crossfit", "--scale", "cpu", "--plan", "--steps", "40", "--control", "same-source", "--threads", "4"]
    result = CliRunner().invoke(main, args, terminal_width=300)
    assert result.exit_code == 0, result.output
    [launch] = [line for line in result.output.splitlines() if line.startswith("launch: ")]
    assert (
        launch
        == "launch: cfbench train --treatment crossfit --scale cpu --out runs/crossfit-cpu --steps 40 --control same-source --threads 4"
    )
    assert "about 0." in result.output and "h on 4 cores" in result.output


def test_training_without_plan_still_needs_out():
    result = CliRunner().invoke(main, ["train", "--treatment", "search-r1", "--scale", "paper"])
    assert result.exit_code == 2 and "--out" in result.output


def test_rollout_rows_bounds_the_rollout_memory_and_lets_a_refused_run_fit():
    config = load_config("search-r1", "paper")
    shape = SHAPES[config.model]
    whole, chunked = (estimate(c, shape, 8, True, "bf16") for c in (config, config | {"rollout_rows": 32}))
    assert chunked["rollout KV cache"] * 10 == pytest.approx(whole["rollout KV cache"])  # 32 rows at a time instead of 320
    assert chunked["weights"] == whole["weights"]  # nothing else changes
    assert plan(config | {"rollout_rows": 32}, 8, 24)[-1].startswith("fits: sharded bf16")  # refused above at 320 rows


def test_with_a_lora_section_only_the_adapters_hold_gradients_and_moments():
    """Hand count for Qwen3.5-4B, LoRA r 64 on every projection of its 32 layers:
    per layer 64 x ((2560 + 2 x 4096) q + 2 x (2560 + 1024) k, v + (4096 + 2560) o + 3 x (2560 + 9216) mlp) = 64 x 59,904;
    x 32 layers = 122.7 M parameters, replicated fp32: gradients 4 B and AdamW 8 B each = 0.49 + 0.98 GB."""
    lora = {
        "r": 64,
        "alpha": 128,
        "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    }
    full = load_config("search-r1", "paper")
    adapted = full | {"lora": lora, "sharding": None, "bf16": False}  # LoRA roles are replicated
    shape = SHAPES["Qwen/Qwen3.5-4B"]
    assert shape.adapter_params(64, tuple(lora["target_modules"])) == 32 * 64 * 59904
    terms, base = (estimate(c, shape, gpus=8, sharded=False, precision="fp32") for c in (adapted, full))
    assert terms["gradients"] / GB == pytest.approx(0.491, rel=0.01) and terms["optimizer"] / GB == pytest.approx(0.981, rel=0.01)
    assert terms["weights"] == base["weights"] and terms["rollout KV cache"] == base["rollout KV cache"]


def test_the_plan_says_whether_the_layout_the_config_asks_for_fits():
    paper = load_config("search-r1", "paper")  # sharded bf16 with checkpointing and chunked log-probs
    assert "as configured (sharded bf16): 67.3 GB per GPU, fits" in plan(paper, 8, 80)
    [replicated] = [line for line in plan(paper | {"sharding": None, "bf16": False}, 8, 80) if line.startswith("as configured")]
    assert replicated.startswith("as configured (replicated fp32)") and "set knobs sharding 'fsdp' and bf16 true" in replicated
    [evolving] = [line for line in plan(load_config("crossfit", "paper"), 8, 80) if line.startswith("as configured")]
    assert evolving == "as configured (sharded bf16): 62.2 GB per GPU, fits"  # 4 roles sharded, one sampler copy shared
