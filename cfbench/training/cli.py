"""`cfbench train`."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cfbench.harness.cli_output import console, job_progress, one_line_errors
from cfbench.harness.errors import CfbenchError
from cfbench.training.config.choices import AUX_BUDGETS, CONTROLS

if TYPE_CHECKING:
    from cfbench.training.config.classes import WarmStartConfig


@click.command("train")
@click.option(
    "--treatment", required=True, help="base, search-r1, dr-zero, msv, crossfit, msv-crossfit or warm-start (training/treatments.py)."
)
@click.option(
    "--scale",
    default="cpu-smoke",
    show_default=True,
    help="cpu-smoke, cpu (the study's table at 135M; for warm-start the shipped adapter's recipe) or paper.",
)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Run directory: checkpoints, metrics, rollouts (unless --plan).")
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --out.")
@click.option("--steps", type=click.IntRange(min=0), default=None, help="Total steps [default: the config's]; may extend a resumed run.")
@click.option("--save-every", type=click.IntRange(min=1), default=None, help="Checkpoint every N steps [default: the config's].")
@click.option(
    "--control", type=click.Choice(CONTROLS), default=None, help="CrossFit control: who scores a question [default: the config's, none]."
)
@click.option("--aux-budget", type=click.Choice(AUX_BUDGETS), default=None, help="CrossFit auxiliary update budget [default: full].")
@click.option(
    "--corpus",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Self-evolution source passages as jsonl(.gz) [default: the config's, train-sources].",
)
@click.option("--allow-eval-corpus", is_flag=True, help="Self-evolution: accept the evaluation corpus as sources (a deliberate leak).")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch CPU threads (default: torch's).")
@click.option(
    "--rollout-server",
    default=None,
    metavar="URL",
    help="Sample rollouts on this OpenAI-compatible server (vLLM with runtime LoRA loading, or cfbench serve-model), "
    "each role's adapter synced every step; needs a lora section (training/core/served.py).",
)
@click.option("--plan", "plan_only", is_flag=True, help="Print the run's per-GPU memory (training/plan.py); refuse one that cannot fit.")
@click.option("--gpus", type=click.IntRange(min=1), default=8, show_default=True, help="--plan: GPUs the run would use.")
@click.option("--gpu-memory", type=click.FloatRange(min=1), default=80, show_default=True, help="--plan: memory of one GPU in GB.")
@click.option(
    "--export-adapter",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="warm-start: when training ends, copy the adapter and its manifest here (e.g. cfbench/models/smollm2-135m-search).",
)
def train_cmd(
    treatment,
    scale,
    out,
    resume,
    steps,
    save_every,
    control,
    aux_budget,
    corpus,
    allow_eval_corpus,
    threads,
    rollout_server,
    export_adapter,
    plan_only,
    gpus,
    gpu_memory,
) -> None:
    """Train a treatment; every checkpoint-N is a model dir `cfbench eval --ckpt` scores unchanged."""
    import torch
    from accelerate import PartialState

    from cfbench.training.config.classes import RLConfig
    from cfbench.training.core.learner import end_processes
    from cfbench.training.trainer import train
    from cfbench.training.treatments import load_config

    if threads:
        torch.set_num_threads(threads)
    with one_line_errors():
        config = load_config(
            treatment,
            scale,
            steps,
            save_every,
            control=control,
            aux_budget=aux_budget,
            corpus=None if corpus is None else str(corpus.resolve()),
            allow_eval_corpus=allow_eval_corpus,
        )
        if rollout_server is not None:
            if not isinstance(config, RLConfig):
                raise CfbenchError(f"--rollout-server applies to the GRPO treatments, not {treatment!r}")
            config |= {"rollout_server": rollout_server}
        if plan_only:
            from cfbench.training.plan import plan

            return click.echo("\n".join(plan(config, gpus, gpu_memory)))
        if out is None:
            raise click.UsageError("Missing option '--out'.")
        if treatment == "warm-start":
            _warm_start(config, out, resume, export_adapter)
            return end_processes()  # a warm start under torchrun ends as a GRPO run does
        if export_adapter is not None:
            raise CfbenchError(f"--export-adapter applies to --treatment warm-start, not {treatment!r}")

        live = {"reward": "", "signal": "", "updated": ""}
        quiet = not PartialState().is_main_process
        with job_progress(f"{treatment} {scale}", "step", config.steps, fields=live, transient=True, quiet=quiet) as progress:
            seen: list[dict] = []

            def on_step(row: dict) -> None:
                seen.append(row)
                progress.update(completed=row["step"], **_signal_fields(seen))
                console.print(f"step {row['step']}/{config.steps}  {_describe(row)}", highlight=False)

            last = train(config, out, resume=resume, on_step=on_step)
        if PartialState().is_main_process:
            console.print(f"checkpoint: {last}  (score it: cfbench eval --ckpt {last} --suite mini --out runs/NAME)")
        end_processes()


def _warm_start(config: WarmStartConfig, out: Path, resume: bool, export: Path | None) -> None:
    from cfbench.training.warmstart import export_adapter, warm_start

    adapter = warm_start(config, out, resume=resume, command=shlex.join(["cfbench", *sys.argv[1:]]))
    console.print(f"adapter: {adapter}")
    if export is not None:
        export_adapter(adapter, export)
        console.print(f"exported to {export}")


def _signal_fields(rows: list[dict]) -> dict[str, str]:
    """The live columns: this step's reward and groups with signal, and how many of this session's steps took an optimizer
    step; so a run whose groups never differ (no gradient, nothing learnt) shows it within a few steps."""
    row = rows[-1]
    reward = row.get("reward", row.get("proposer_reward") if row.get("phase") == "proposer" else row.get("solver_reward"))
    signal = row.get("groups_with_signal")
    stepped = sum(bool(r.get("optimizer_step")) for r in rows)
    return {"reward": _num(reward, ".3f"), "signal": _num(signal, ".0%"), "updated": f"{stepped}/{len(rows)}"}


def _num(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _describe(row: dict) -> str:
    wall = f"rollout {row['rollout_s']:.0f} s  update {row['update_s']:.0f} s"
    signal = f"groups with signal {_num(row.get('groups_with_signal'), '.0%')}  optimizer step {_stepped(row.get('optimizer_step'))}"
    if "phase" not in row:
        return (
            f"reward {row['reward']:.3f}  {signal}  loss {row['loss']:+.4f}  response {row['response_tokens']:.0f} tok  "
            f"searches {row['searches_per_rollout']:.2f}  well-formed {row['well_formed']:.2f}  {wall}"
        )
    return (
        f"round {row['round']} {row['phase']}  proposer reward {_num(row['proposer_reward'], '.3f')}  "
        f"format {_num(row['format'], '.2f')}  admitted {row['admitted']}/{row['tasks']}  agreement {_num(row['agreement'], '.2f')}  "
        f"{signal}  loss {_num(row['loss'], '+.4f')}  {wall}"
    )


def _stepped(value) -> str:
    return "-" if value is None else "yes" if value else "no (every advantage 0)"
