"""cfbench's entry point keeps other packages' notices and progress bars out of its output (issue 39): a transformers
FutureWarning (the deprecated `is_gradient_checkpointing`, which peft reads when it loads an adapter) and the "Loading
weights" bar of from_pretrained appear in a plain interpreter and not after `quiet_third_parties`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = """
import sys
if sys.argv[1] == "quiet":
    from cfbench.cli import quiet_third_parties
    quiet_third_parties()
from transformers import LlamaConfig, LlamaForCausalLM
config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                     vocab_size=64)
LlamaForCausalLM(config).save_pretrained(sys.argv[2])
model = LlamaForCausalLM.from_pretrained(sys.argv[2])
model.is_gradient_checkpointing
print("loaded")
"""


def _stderr(mode: str, tmp_path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY", "TRANSFORMERS_NO_ADVISORY_WARNINGS", "PYTHONWARNINGS"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(tmp_path / mode)], env=env, capture_output=True, text=True, timeout=600, check=True
    )
    assert done.stdout.strip() == "loaded"
    return done.stderr


def test_third_party_notices_and_bars_are_kept_out_of_cfbench_output(tmp_path):
    plain = _stderr("plain", tmp_path)
    assert "FutureWarning" in plain and "is_gradient_checkpointing" in plain and "Loading weights" in plain  # what is filtered
    assert _stderr("quiet", tmp_path) == ""
