"""Run under torchrun by tests/test_training_processes.py: a short CrossFit run (scripted proposer, real solvers) in every process.

torchrun --nproc-per-node N tests/processes_selfevolve.py MODEL OUT '{"knob": value, ...}'
"""

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))  # the repository root: tests.* below

from cfbench.harness.backends.tokens import PromptTokens  # noqa: E402
from cfbench.training.core.learner import end_processes  # noqa: E402
from cfbench.training.trainer import train  # noqa: E402
from tests.test_selfevolve_run import ScriptedProposer, config  # noqa: E402


class UnevenProposer(ScriptedProposer):
    """The scripted proposal, with its answer left out for sources whose title has an odd length: the proposer's rewards
    then differ within a step, so its updates move its weights (the tiny solvers never match a label: theirs do not)."""

    @staticmethod
    def propose(context: str) -> str:
        text = ScriptedProposer.propose(context)
        title = re.search(r"Source document: \(Title: (.*?)\)", context).group(1)
        return text.split("<answer>")[0] if "<question>" in text and len(title) % 2 else text


if __name__ == "__main__":
    model, out, changes = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
    tokens = PromptTokens.load("smollm2-135m")
    # Step 1's proposals are scripted, so its uneven rewards move the proposer (at a learning rate far above a real run's);
    # steps 2 and 3 sample the proposer's own text from its new weights.
    knobs = {"model": model, "prompts_per_step": 4, "learning_rate": 1e-2, **changes}
    train(config("crossfit", 3, 3) | knobs, out, proposer_engine=lambda step: UnevenProposer(tokens) if step == 1 else None)
    end_processes()
