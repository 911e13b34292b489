"""Bad input that used to end in a traceback (or only after a model had loaded) now ends in one line that says what to
do, before any model loads, and leaves no run folder behind."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from cfbench.cli import main


def refused(args: list[str], out) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, lines, result.exception)
    assert not out.exists()  # nothing left behind
    return lines[0]


def bad_checkpoint(tmp_path, config: str):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(config)
    (ckpt / "model.safetensors").write_bytes(b"\0" * 64)
    return ckpt


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


EVAL = ["eval", "--suite", "mini", "--ckpt", "smollm2-135m"]


def test_an_out_under_proc_or_under_a_file_is_refused_before_the_model_loads(tmp_path):
    assert refused([*EVAL, "--out", "/proc/x"], tmp_path / "none") == (
        "error: --out /proc/x is under /proc, which the kernel provides; choose a folder of your own"
    )
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "run"
    assert refused([*EVAL, "--out", out], out) == f"error: --out {out} is under {tmp_path / 'file'}, which is a file; choose another --out"


@pytest.mark.parametrize(
    "config,why", [("", "Expecting value at line 1"), ('{"model_type": "lla', "Unterminated string"), ("[]", "names no model_type")]
)
def test_a_checkpoint_whose_config_does_not_parse_is_one_line(tmp_path, config, why):
    ckpt = bad_checkpoint(tmp_path, config)
    line = refused(["eval", "--suite", "mini", "--ckpt", ckpt, "--out", tmp_path / "run"], tmp_path / "run")
    assert line.startswith(f"error: checkpoint {ckpt}: config.json ") and why in line and "restore it" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="about a torch build without CUDA")
def test_device_cuda_on_a_cpu_only_torch_is_one_line(tmp_path):
    line = refused([*EVAL, "--device", "cuda", "--out", tmp_path / "run"], tmp_path / "run")
    assert f"--device 'cuda' cannot be used with torch {torch.__version__} here" in line and "install a CUDA build of torch" in line


def test_a_hub_id_not_at_hand_offline_is_one_line(tmp_path, offline):
    line = refused(["eval", "--suite", "mini", "--ckpt", "no-such-org/no-such-model", "--out", tmp_path / "run"], tmp_path / "run")
    assert line == (
        "error: checkpoint 'no-such-org/no-such-model': offline (HF_HUB_OFFLINE) and not in the local hub cache; download it "
        "where the hub is reachable (hf download no-such-org/no-such-model) or pass a local checkpoint directory"
    )


@pytest.mark.parametrize("treatment", ["dr-zero", "search-r1", "base"])
def test_train_at_paper_scale_without_the_model_is_one_line_and_makes_no_run_folder(tmp_path, offline, treatment):
    """The paper scale's model is a hub id: a machine without it (and off the hub) is refused before config.json,
    folds.json or audit/ are written, so the same command runs once the model is there."""
    out = tmp_path / "run"
    line = refused(["train", "--treatment", treatment, "--scale", "paper", "--out", out], out)
    assert line.startswith("error: checkpoint 'Qwen/Qwen3.5-4B': offline (HF_HUB_OFFLINE) and not in the local hub cache")
