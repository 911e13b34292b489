"""`cfbench train` for real: SmolLM2-135M, the cpu-smoke search-r1 config, BM25 rollouts, accelerate on CPU."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file

from cfbench.cli import main
from cfbench.harness.checkpoints import resolve
from cfbench.harness.runrecord import lock_directory, unlock_directory
from cfbench.training.config.classes import SearchR1Config
from cfbench.training.config.schema import parse, to_json
from cfbench.training.treatments import load_config


def cfbench(*args, timeout=900):
    done = subprocess.run([sys.executable, "-m", "cfbench.cli", *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def two_step_config() -> SearchR1Config:
    """Two cpu-smoke Search-R1 steps from the shipped warm start: step 1's five samples differ in format credit (well
    formed or not), so its group has a non-zero advantage and must move the weights."""
    return load_config("search-r1", "cpu-smoke", 2, 1)


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, request):
    """Two saved steps, and beside them a copy of the run as it stood after step 1 (what a crash there leaves).

    Trained in this process, like the resumed run it is compared with, so both use the same torch
    threads (a float sum's order, hence its last bits, depends on them). Kept when a test failed.
    """
    from cfbench.training.trainer import train

    root = tmp_path_factory.mktemp("train")
    out = root / "search-r1"

    def snapshot(row):
        if row["step"] == 1:
            shutil.copytree(out, root / "after-step-1")

    train(two_step_config(), out, on_step=snapshot)
    failed = request.session.testsfailed
    yield out
    if request.session.testsfailed == failed:
        shutil.rmtree(root)


@pytest.mark.slow
def test_a_step_changes_the_weights_and_records_everything(two_steps):
    rows = metrics(two_steps)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["loss"] != 0 and rows[0]["grad_norm"] > 0  # step 1's group had unequal rewards
    assert all(r["rollout_s"] > 0 and r["update_s"] > 0 and r["response_tokens"] > 0 for r in rows)
    assert all(0 < r["cpu_s"] <= 1.05 * os.cpu_count() * (r["rollout_s"] + r["update_s"]) for r in rows)
    base = load_file(resolve(two_step_config().model).location + "/model.safetensors")
    trained = load_file(two_steps / "checkpoint-1" / "model.safetensors")
    changed = [k for k in trained if not (trained[k] == base[k]).all()]
    assert len(changed) > 10
    record = json.loads((two_steps / "checkpoint-2" / "cfbench_train.json").read_text())
    assert record["step"] == 2 and parse(SearchR1Config, record["config"], "record") == two_step_config()
    rollouts = [json.loads(line) for line in (two_steps / "rollouts" / "step-1.jsonl").read_text().splitlines()]
    assert len(rollouts) == 5 and len({json.dumps(r["turns"]) for r in rollouts}) > 1  # sampled, not greedy
    assert rows[0]["groups_with_signal"] == float(len({r["reward"] for r in rollouts}) > 1) == 1.0 and rows[0]["optimizer_step"] is True
    assert (two_steps / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # one resume state, in the latest checkpoint: optimizer, scheduler and RNG; the weights only as the HF model
    assert not (two_steps / "checkpoint-1" / "state").exists() and (two_steps / "checkpoint-1" / "model.safetensors").is_file()
    state = sorted(p.name for p in (two_steps / "checkpoint-2" / "state").iterdir())
    assert "optimizer.bin" in state and "scheduler.bin" in state and not [n for n in state if n.startswith("model")]


@pytest.mark.slow
def test_resume_gives_the_uninterrupted_next_step(two_steps, tmp_path):
    from cfbench.training.trainer import train

    cut = tmp_path / "cut"
    shutil.copytree(two_steps.parent / "after-step-1", cut)
    assert sorted(p.name for p in cut.glob("checkpoint-*")) == ["checkpoint-1"] and (cut / "checkpoint-1" / "state").is_dir()
    with (cut / "metrics.jsonl").open("a") as fh:  # a crash after logging step 2 but before its checkpoint
        fh.write(json.dumps({"step": 2, "loss": 123.0}) + "\n")
    train(two_step_config(), cut, resume=True)
    resumed, uninterrupted = metrics(cut), metrics(two_steps)
    assert [r["step"] for r in resumed] == [1, 2]
    assert resumed[1]["loss"] == pytest.approx(uninterrupted[1]["loss"], abs=1e-6)
    assert (cut / "rollouts" / "step-2.jsonl").read_bytes() == (two_steps / "rollouts" / "step-2.jsonl").read_bytes()
    # model, optimizer and scheduler state came back exactly: the second update lands on the same weights
    assert (
        load_file(cut / "checkpoint-2" / "model.safetensors").keys() == load_file(two_steps / "checkpoint-2" / "model.safetensors").keys()
    )
    a, b = load_file(cut / "checkpoint-2" / "model.safetensors"), load_file(two_steps / "checkpoint-2" / "model.safetensors")
    assert all((a[k] == b[k]).all() for k in a)
    assert not (cut / "checkpoint-1" / "state").exists()  # superseded once checkpoint-2 was in place


@pytest.mark.slow
def test_the_checkpoint_is_scored_by_eval_unchanged(two_steps, tmp_path):
    out = tmp_path / "eval"
    done = cfbench(
        "eval",
        "--ckpt",
        str(two_steps / "checkpoint-2"),
        "--suite",
        "mini",
        "--out",
        str(out),
        "--max-new-tokens",
        "4",
        "--max-searches",
        "1",
    )
    assert "avg7" in done.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["suite"]["n"] == 70 and results["model"]["weights_sha256"] == resolve(str(two_steps / "checkpoint-2")).weights_sha256
    record = (two_steps / "checkpoint-2" / "cfbench_train.json").read_bytes()
    assert results["model"]["training_record"]["sha256"] == hashlib.sha256(record).hexdigest()  # the run that trained it


def test_a_training_checkpoint_is_tied_to_its_run_by_hashes(tiny_llama, tmp_path):
    from cfbench.harness.errors import CfbenchError

    checkpoint = tmp_path / "checkpoint-3"
    shutil.copytree(tiny_llama, checkpoint)
    assert "training_record" not in resolve(str(checkpoint)).describe()  # any other checkpoint's record is unchanged
    record = checkpoint / "cfbench_train.json"
    record.write_text(json.dumps({"step": 3, "config": {"seed": 0, "knobs": {"topk": 3}}}) + "\n")
    tied = resolve(str(checkpoint)).describe()["training_record"]
    assert tied == {
        "step": 3,
        "sha256": hashlib.sha256(record.read_bytes()).hexdigest(),
        "config_sha256": hashlib.sha256(b'{"knobs":{"topk":3},"seed":0}').hexdigest(),
    }
    record.write_text(json.dumps({"config": {"knobs": {"topk": 3}, "seed": 0}, "step": 3}))  # the same config, other bytes
    again = resolve(str(checkpoint)).describe()["training_record"]
    assert again["config_sha256"] == tied["config_sha256"] and again["sha256"] != tied["sha256"]
    record.write_text("{")
    with pytest.raises(CfbenchError, match="cfbench_train.json: not JSON"):
        resolve(str(checkpoint))


@pytest.mark.slow
def test_base_is_the_untrained_model(tmp_path):
    cfbench("train", "--treatment", "base", "--scale", "cpu-smoke", "--out", str(tmp_path / "base"))
    saved = load_file(tmp_path / "base" / "checkpoint-0" / "model.safetensors")
    original = load_file(resolve(load_config("base", "cpu-smoke").model).location + "/model.safetensors")
    assert all((saved[k] == original[k]).all() for k in saved)
    cfbench(
        "train", "--treatment", "base", "--scale", "cpu-smoke", "--out", str(tmp_path / "base"), "--resume"
    )  # nothing to resume: saved again


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_every_role_gets_its_own_weights_and_optimizer_state_back(tmp_path, tiny_llama, lora):
    """Roles of one shape (main, proposer, solvers) saved together: restore puts each role's AdamW moments back on it.
    With a lora section each role saves only its adapter (and names the config's model as its base)."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoTokenizer

    from cfbench.training.core.episodes import Episode
    from cfbench.training.core.learner import learner, restore, resume_from, save
    from cfbench.training.core.policy_update import update

    config, names = load_config("crossfit", "cpu-smoke"), ["main", "proposer", "aux-0"]
    if lora:
        config |= {"lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}}

    def roles_from(saved):
        accelerator = Accelerator(cpu=True)
        return accelerator, {name: learner(config, tiny_llama, accelerator, config.updates_of(name), saved(name)) for name in names}

    accelerator, roles = roles_from(lambda name: None)
    for k, name in enumerate(names):  # one update each, on other tokens: every role's moments differ
        update(
            roles[name],
            accelerator,
            [Episode(list(range(10 + 7 * k, 30 + 7 * k)), [0] * 10 + [1] * 10, r, 0) for r in (0.0, 1.0)],
            config,
            0,
        )
    save(accelerator, roles, AutoTokenizer.from_pretrained(tiny_llama), tmp_path, 1, {})
    if lora:
        adapter = json.loads((tmp_path / "checkpoint-1" / "proposer" / "adapter_config.json").read_text())
        assert adapter["base_model_name_or_path"] == config.model
        assert not list((tmp_path / "checkpoint-1").glob("model*.safetensors"))  # the frozen base is not copied
    accelerator, back = roles_from(lambda name: resume_from(tmp_path, 1, name))
    restore(accelerator, tmp_path / "checkpoint-1", back)

    def moments(role):
        return [s[m] for _, s in sorted(role.optimizer.state_dict()["state"].items()) for m in ("exp_avg", "exp_avg_sq")]

    for name in names:
        assert all(torch.equal(a, b) for a, b in zip(moments(roles[name]), moments(back[name]), strict=True)), name
        assert all(torch.equal(a, b) for a, b in zip(roles[name].model.parameters(), back[name].model.parameters(), strict=True)), name
    assert not all(map(torch.equal, moments(roles["main"]), moments(roles["proposer"])))  # so a mix-up of roles would show
    trained = [n for n, p in back["main"].model.named_parameters() if p.requires_grad]
    assert trained and all(("lora_" in n) == lora for n in trained)


def test_only_checkpoint_n_directories_are_checkpoints(tmp_path):
    from cfbench.training.core.learner import checkpoints

    for name in ["checkpoint-2", "checkpoint-10", "checkpoint-3-old", ".checkpoint-4.tmp", "checkpoint-x"]:
        (tmp_path / name).mkdir()
    assert [(step, path.name) for step, path in checkpoints(tmp_path)] == [(2, "checkpoint-2"), (10, "checkpoint-10")]


@pytest.mark.slow
def test_a_disk_too_small_for_a_checkpoint_is_refused_and_a_failed_save_leaves_the_last_checkpoint_whole(tmp_path, tiny_llama, monkeypatch):
    from accelerate import Accelerator

    from cfbench.harness.errors import CfbenchError
    from cfbench.training.trainer import train

    config = load_config("search-r1", "cpu-smoke", 2, 1) | {"model": str(tiny_llama)}
    real = shutil.disk_usage
    with monkeypatch.context() as patched:  # 10 MB free: a checkpoint of the 3.2M-parameter model with AdamW needs about 55 MB
        patched.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=10 << 20))
        with pytest.raises(CfbenchError, match=r"needs about 0\.06 GB at .* and 0\.01 GB are free; free some space"):
            train(config, tmp_path / "early")
    assert sorted(p.name for p in (tmp_path / "early").iterdir()) == ["config.json", "rollouts"]  # no step ran

    run, original = tmp_path / "run", Accelerator.save_state

    def full_disk_at_step_2(self, output_dir, **kwargs):
        if "checkpoint-2" in output_dir:
            raise OSError(28, "No space left on device")
        return original(self, output_dir, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(Accelerator, "save_state", full_disk_at_step_2)
        with pytest.raises(OSError, match="No space left"):
            train(config, run)
    assert sorted(p.name for p in run.iterdir() if "checkpoint" in p.name) == ["checkpoint-1"] and (run / "checkpoint-1" / "state").is_dir()
    (run / ".checkpoint-7.tmp" / "state").mkdir(parents=True)  # what a save killed mid-write (no except runs) leaves
    train(config, run, resume=True)
    assert [r["step"] for r in metrics(run)] == [1, 2] and (run / "checkpoint-2" / "state").is_dir() and not list(run.glob(".checkpoint-*"))


def train_cli(*args):
    result = CliRunner().invoke(main, ["train", *args])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return result.exit_code, lines


def test_bad_training_input_is_one_line_and_overwrites_nothing(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(to_json(load_config("base", "cpu-smoke"))))
    (run / "keep.txt").write_text("finished work")
    pruned = tmp_path / "pruned"  # a run whose latest checkpoint lost its resume state
    (pruned / "checkpoint-3").mkdir(parents=True)
    (pruned / "config.json").write_text(json.dumps(to_json(load_config("search-r1", "cpu-smoke"))))
    for args, message in [
        (["--treatment", "nope"], "Invalid value for '--treatment': 'nope' is not one of 'base', 'search-r1'"),
        (["--treatment", "search-r1", "--scale", "huge"], "Invalid value for '--scale': 'huge' is not one of 'cpu', 'cpu-smoke', 'paper'"),
        (["--treatment", "search-r1", "--out", str(run)], "already holds files; pass --resume"),
        (["--treatment", "search-r1", "--out", str(run), "--resume"], "holds a 'base' run, not 'search-r1'"),
        (["--treatment", "search-r1", "--out", str(tmp_path / "empty"), "--resume"], "holds no training run"),
        (["--treatment", "search-r1", "--scale", "cpu-smoke", "--out", str(pruned), "--resume"], "checkpoint-3 has no state/"),
    ]:
        code, lines = train_cli(*args, *([] if "--out" in args else ["--out", str(tmp_path / "x")]))
        assert code == 2 and len(lines) == 1 and message in lines[0], (args, lines)
    assert (run / "keep.txt").read_text() == "finished work" and sorted(p.name for p in run.iterdir()) == ["config.json", "keep.txt"]


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("learning_rate", 0, "knob learning_rate must be a number in (0, 1)"),
        ("samples_per_prompt", 1, "knob samples_per_prompt must be at least 2"),
        ("temperature", 0, "knob temperature must be a number in (0, 2]"),
        ("micro_batch", 0, "knob micro_batch must be an integer >= 1"),
    ],
)
def test_out_of_range_knobs(key, value, message):
    from cfbench.harness.errors import CfbenchError

    data = to_json(load_config("search-r1", "cpu-smoke")) | {key: value}
    with pytest.raises(CfbenchError, match=re.escape(f"configs/search-r1.cpu-smoke.json: {message}")):
        parse(SearchR1Config, data, "configs/search-r1.cpu-smoke.json")


def test_a_run_being_trained_is_refused_to_a_second_writer(tmp_path):
    """One writer at a time, as for an eval's run directory: while a process holds the run's lock, `train --resume`
    there is a one-line refusal naming it, and writes nothing."""
    held = tmp_path / "held"
    held.mkdir()
    (held / "config.json").write_text(json.dumps(to_json(load_config("base", "cpu-smoke"))))
    before = (held / "config.json").read_bytes()
    fd = lock_directory(held)
    try:
        code, lines = train_cli("--treatment", "base", "--scale", "cpu-smoke", "--out", str(held), "--resume")
    finally:
        unlock_directory(held, fd)
    assert code == 2 and len(lines) == 1 and f"{held} is being written by process {os.getpid()}" in lines[0], lines
    assert (held / "config.json").read_bytes() == before and sorted(p.name for p in held.iterdir()) == ["config.json"]
