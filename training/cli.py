"""`cfbench train`."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli_output import console, one_line_errors


@click.command("train")
@click.option("--treatment", required=True, help="base or search-r1 (training/configs/TREATMENT.SCALE.json).")
@click.option("--scale", default="cpu-smoke", show_default=True, help="cpu-smoke or paper.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Run directory: checkpoints, metrics, rollouts.")
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --out.")
@click.option("--steps", type=click.IntRange(min=0), default=None, help="Total steps [default: the config's]; may extend a resumed run.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch CPU threads (default: torch's).")
def train_cmd(treatment, scale, out, resume, steps, threads) -> None:
    """Train a treatment; every checkpoint-N is a model dir `cfbench eval --ckpt` scores unchanged."""
    import torch
    from accelerate import PartialState

    from training.treatments import load_config
    from training.trainer import train

    if threads:
        torch.set_num_threads(threads)
    with one_line_errors():
        config = load_config(treatment, scale, steps)

        def on_step(row: dict) -> None:
            console.print(f"step {row['step']}/{config['steps']}  reward {row['reward']:.3f}  loss {row['loss']:+.4f}  "
                          f"response {row['response_tokens']:.0f} tok  searches {row['searches_per_rollout']:.2f}  "
                          f"well-formed {row['well_formed']:.2f}  rollout {row['rollout_s']:.0f} s  update {row['update_s']:.0f} s",
                          highlight=False)

        last = train(config, out, resume=resume, on_step=on_step)
        if PartialState().is_main_process:
            console.print(f"checkpoint: {last}  (score it: cfbench eval --ckpt {last} --suite mini --out runs/NAME)")
