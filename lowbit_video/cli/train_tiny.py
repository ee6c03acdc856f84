"""`lowbit-video train-tiny`: train the shipped tiny-shapes model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from .common import JsonOpt, err, print_json, user_errors


def register(app: typer.Typer) -> None:
    app.command("train-tiny")(train_tiny)


@user_errors
def train_tiny(
    steps: int = typer.Option(..., "--steps", min=1, help="Train until this global step (a resumed run counts from its checkpoint)."),
    out_dir: Path = typer.Option(..., "--out", help="Run folder: checkpoint.pt, loss.jsonl, summary.json, model/ (EMA weights, fp16)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/checkpoint.pt (model, EMA, optimizer, step, RNG)."),
    batch: int = typer.Option(64, "--batch", min=1, help="Clips per step."),
    lr: float = typer.Option(5e-4, "--lr", help="AdamW learning rate (after a linear warm-up)."),
    device: str = typer.Option("auto", "--device", help="cuda, cpu or auto."),
    minutes: Optional[float] = typer.Option(None, "--minutes", help="Stop (with a checkpoint) after this many minutes."),
    compile_: bool = typer.Option(False, "--compile", help="torch.compile the transformer blocks (regional)."),
    seed: int = typer.Option(0, "--seed"),
    workers: int = typer.Option(-1, "--workers", help="Clip-rendering processes (-1: cores - 1; 0: in-process)."),
    ckpt_every: float = typer.Option(60.0, "--ckpt-every", help="Seconds between checkpoints."),
    pool_chunks: int = typer.Option(64, "--pool-chunks", min=1, help="Data pool size in chunks of 1024 clips."),
    as_json: bool = JsonOpt,
) -> None:
    """Train the shipped tiny-shapes text-to-video model (rectified flow, Wan objective)."""
    from ..models.tiny_shapes.train import TrainConfig, train

    cfg = TrainConfig(steps=steps, out=str(out_dir), batch=batch, lr=lr, device=device, minutes=minutes,
                      compile=compile_, seed=seed, workers=workers, ckpt_every_s=ckpt_every,
                      pool_chunks=pool_chunks)
    try:
        summary = train(cfg, resume=resume, log=(lambda m: print(m, file=sys.stderr, flush=True)) if as_json
                        else (lambda m: err.print(m, highlight=False)))
    except (FileNotFoundError, RuntimeError) as e:
        raise UserError(str(e)) from None
    if as_json:
        print_json(summary)

