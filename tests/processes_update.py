"""Run by tests/test_training_processes.py, alone or under torchrun: updates of a role on a fixed batch with the config
changes given (sharding, bf16, ...), optionally saved as checkpoint-N or continued from checkpoint-N; the main
process writes the final weights and the last update's statistics to OUT/result, and a single process also the first
update's gradients (what tests/tolerances.py sizes a tolerance by).

    [torchrun --nproc-per-node P] tests/processes_update.py MODEL OUT '{"knob": value, ...}' UPDATES [save|resume]
"""

import json
import sys
from pathlib import Path

from safetensors.torch import save_file
from transformers import AutoTokenizer

from cfbench.training.core.episodes import Episode
from cfbench.training.core.learner import accelerator_for_training, end_processes, learner, restore, resume_from, save, saved_weights
from cfbench.training.core.policy_update import update
from cfbench.training.treatments import load_config
from tolerances import first_gradients


def batch() -> list[Episode]:
    """Two prompts' groups of two episodes, rewards 0 and 1 in each (every advantage is non-zero), on different tokens."""
    return [Episode(list(range(10 + 7 * k, 40 + 5 * k)), [0] * 12 + [1] * (18 - 2 * k), float(k % 2), k // 2) for k in range(4)]


if __name__ == "__main__":
    model, out, changes, updates = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
    mode = sys.argv[5] if len(sys.argv) > 5 else ""
    config = load_config("search-r1", "cpu-smoke") | {"model": model, "max_grad_norm": 100.0, **changes}
    accelerator = accelerator_for_training()
    out.mkdir(parents=True, exist_ok=True)
    start = 1 if mode == "resume" else 0
    roles = {"main": learner(config, model, accelerator, 10, resume_from(out, start, "main"))}
    if start:
        restore(accelerator, out / f"checkpoint-{start}", roles)
    world, rank = accelerator.num_processes, accelerator.process_index
    for _ in range(updates):
        stats = update(roles["main"], accelerator, [e for e in batch() if e.group % world == rank], config, 0)  # whole groups
    if mode == "save":
        save(accelerator, roles, AutoTokenizer.from_pretrained(model), out, start + updates, {})
    model, gathered = saved_weights(accelerator, roles["main"])  # what a checkpoint of the role holds
    weights = {name: tensor.detach().clone() for name, tensor in (model.state_dict() if gathered is None else gathered).items()}
    if accelerator.is_main_process:
        (out / "result").mkdir(exist_ok=True)
        save_file(weights, out / "result" / "weights.safetensors")
        (out / "result" / "stats.json").write_text(json.dumps({"grad_norm": stats.grad_norm}))
    if world == 1 and updates == 1 and not start:
        save_file(first_gradients(roles["main"].optimizer, model), out / "result" / "gradients.safetensors")
    end_processes()
