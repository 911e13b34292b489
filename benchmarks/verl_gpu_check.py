"""2 Search-R1 steps through verl on one GPU (benchmarks/verl_gpu_check.sh makes its venv and model).

Search-R1's paper config with the model replaced by a small local one and the batch cut to 16 prompts x 5
samples, 2 steps, launched as `cfbench train --engine verl` launches it (training/verl_engine/launch.py).
verl's console logger prints each step's metrics; this prints the ones the check reports side by side:
timing_s/step (step time), perf/throughput (tokens/s per GPU), perf/max_memory_allocated_gb (peak).
"""

import argparse
import contextlib
import io
import re
import sys
import time
from pathlib import Path

from cfbench.training.treatments import load_config
from cfbench.training.verl_engine.launch import launch

REPORTED = ("timing_s/step", "perf/throughput", "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    changes = {"model": str(args.model.resolve()), "steps": 2, "prompts_per_step": 16, "warmup_steps": 0, "save_every": 1000}
    config = load_config("search-r1", "paper") | changes
    began, log = time.time(), io.StringIO()

    class Tee(io.TextIOBase):
        def write(self, text: str) -> int:
            sys.__stdout__.write(text)
            return log.write(text)

    with contextlib.redirect_stdout(Tee()):
        launch(config, args.out, gpus=1)
    print(f"verl check: 2 steps of {config.prompts_per_step} x {config.samples_per_prompt} in {time.time() - began:.0f} s (with start-up)")
    for key in REPORTED:
        values = re.findall(rf"{re.escape(key)}:\s*([0-9.eE+-]+)", log.getvalue())
        print(f"{key:32s} " + "  ".join(f"step {i + 1}: {float(v):.3f}" for i, v in enumerate(values)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
