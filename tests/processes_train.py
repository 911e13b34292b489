"""Run under torchrun by tests/test_training_processes.py: a short Search-R1 run of a given model in every process.

torchrun --nproc-per-node N tests/processes_train.py MODEL OUT '{"knob": value, ...}'
"""

import json
import sys
from pathlib import Path

from cfbench.training.core.learner import end_processes
from cfbench.training.trainer import train
from cfbench.training.treatments import load_config

if __name__ == "__main__":
    model, out, changes = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
    train(load_config("search-r1", "cpu-smoke", 2, 1) | {"model": model, **changes}, out)
    end_processes()
