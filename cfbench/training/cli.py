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
from cfbench.training.treatments import TREATMENTS, scales

if TYPE_CHECKING:
    from cfbench.training.config.classes import WarmStartConfig


SCALES = sorted({scale for treatment in TREATMENTS for scale in scales(treatment)})


@click.command("train")
@click.option(
    "--treatment",
    type=click.Choice(list(TREATMENTS)),
    required=True,
    help="What to train (training/treatments.py; warm-start makes the bundled smollm2-135m-search, warm-start-proposer "
    "the self-evolution proposer's smollm2-135m-propose).",
)
@click.option(
    "--scale",
    type=click.Choice(SCALES),
    default="cpu-smoke",
    show_default=True,
    help="cpu-smoke: a few small steps that check the set-up; cpu: the study's table at 135M on CPU (for warm-start, the "
    "shipped adapter's recipe); paper: the study's GPU scale.",
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
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KNOB=VALUE",
    help="Change one knob of the config, VALUE as JSON, a section's knob dotted (--set learning_rate=1e-3 --set "
    "knobs.max_obs_tokens=500); recorded in the run's config.json, and given again with --resume.",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch CPU threads (default: torch's).")
@click.option(
    "--rollout-server",
    default=None,
    metavar="URL",
    help="Sample rollouts on this OpenAI-compatible server (vLLM with runtime LoRA loading, or cfbench serve-model), "
    "each role's adapter synced every step; needs a lora section (training/core/served.py).",
)
@click.option(
    "--engine",
    type=click.Choice(("accelerate", "verl")),
    default="accelerate",
    show_default=True,
    help="accelerate: cfbench's own loop (CPU, tests, one node); verl: the GRPO treatments on verl (FSDP2, vLLM rollouts; "
    "verl in its own venv: docs/training-at-scale.md, Environment; training/verl_engine).",
)
@click.option("--dry-run", is_flag=True, help="--engine verl: print the verl configuration the run would launch, and exit.")
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Print the run's plan (steps, tokens, estimated time, launch command; per-GPU memory at the paper scale, in verl's "
    "layout with --engine verl) and train nothing.",
)
@click.option("--gpus", type=click.IntRange(min=1), default=8, show_default=True, help="--plan, --engine verl: GPUs the run uses.")
@click.option("--gpu-memory", type=click.FloatRange(min=1), default=80, show_default=True, help="--plan: memory of one GPU in GB.")
@click.option(
    "--export-adapter",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="warm-start, warm-start-proposer: when training ends, copy the adapter and its manifest here (e.g. "
    "cfbench/models/smollm2-135m-search).",
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
    settings,
    threads,
    rollout_server,
    export_adapter,
    engine,
    dry_run,
    plan_only,
    gpus,
    gpu_memory,
) -> None:
    """Train a treatment; every checkpoint-N is a model dir `cfbench eval --ckpt` scores unchanged.

    \b
    Examples:
      cfbench train --treatment search-r1 --scale cpu-smoke --out runs/smoke      # a few steps, minutes
      cfbench train --treatment crossfit --scale cpu --plan                       # what a run takes, before starting it
      cfbench train --treatment crossfit --scale cpu --out runs/crossfit          # the study's 135M row, hours on 2 cores
      cfbench train --treatment search-r1 --scale cpu --out runs/sr1 --resume     # continue from the last checkpoint
      cfbench train --treatment search-r1 --scale cpu --steps 20 --set learning_rate=1e-3 --out runs/lr-pilot
      cfbench train --treatment search-r1 --scale paper --plan --gpus 8 --gpu-memory 80
    """
    import torch
    from accelerate import PartialState

    from cfbench.training.config.classes import RLConfig, WarmStartConfig
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
            settings=settings,
        )
        if rollout_server is not None:
            if not isinstance(config, RLConfig):
                raise CfbenchError(f"--rollout-server applies to the GRPO treatments, not {treatment!r}")
            config |= {"rollout_server": rollout_server}
        if plan_only:
            from cfbench.training.plan import plan
            from cfbench.training.verl_engine.plan import verl_plan

            if engine == "verl":
                return click.echo("\n".join(verl_plan(config, gpus, gpu_memory)))
            return click.echo("\n".join(plan(config, gpus, gpu_memory, threads or 2, _run_options(click.get_current_context()))))
        if dry_run and engine != "verl":
            raise CfbenchError("--dry-run prints the configuration --engine verl launches: add --engine verl")
        if engine == "verl":
            from cfbench.training.verl_engine.launch import dry_run as verl_dry_run
            from cfbench.training.verl_engine.launch import launch

            if dry_run:
                return click.echo(verl_dry_run(config, out or Path("OUT"), gpus), nl=False)
            if out is None:
                raise click.UsageError("Missing option '--out'.")
            return launch(config, out, gpus, resume)
        if out is None:
            raise click.UsageError("Missing option '--out'.")
        if isinstance(config, WarmStartConfig):
            _warm_start(config, out, resume, export_adapter)
            return end_processes()  # a warm start under torchrun ends as a GRPO run does
        if export_adapter is not None:
            raise CfbenchError(f"--export-adapter applies to the warm starts (warm-start, warm-start-proposer), not {treatment!r}")

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


def _run_options(ctx: click.Context) -> tuple[str, ...]:
    """The options given that change the run, as the plan's launch command repeats them."""
    out: list[str] = []
    for param in ctx.command.params:
        if param.name in ("treatment", "scale", "out", "plan_only", "gpus", "gpu_memory", "threads", "resume"):
            continue
        if ctx.get_parameter_source(param.name) == click.core.ParameterSource.COMMANDLINE:
            value = ctx.params[param.name]
            if param.is_flag:
                out.append(param.opts[0])
            else:
                out += [x for v in (value if param.multiple else (value,)) for x in (param.opts[0], str(v))]
    return tuple(out)


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
