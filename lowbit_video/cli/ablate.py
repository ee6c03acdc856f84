"""`lowbit-video ablate`: run an ablation study of recipes/ablations/ (or list them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from .common import (DEVICE_HELP, GreedyCommand, JsonOpt, RichReporter, err, line_progress, out, print_json, progress_bar,
                     report_broken, short_path, user_errors)


def _seeds(values: list[str] | None) -> list[int] | None:
    from ..errors import UserError

    if not values:
        return None
    seeds = []
    for v in values:
        for part in str(v).replace(",", " ").split():
            try:
                s = int(part)
            except ValueError:
                raise UserError(f"--seeds: expected non-negative integers, got {part!r}") from None
            if s < 0 or s >= 2**63:
                raise UserError(f"--seeds: seeds must be integers in [0, 2^63), got {s}")
            seeds.append(s)
    return seeds


class _CliReporter:
    """Stages as rich progress bars on stderr; generate's own bars for the runs."""

    def __init__(self, quiet: bool, device: str = "") -> None:
        self.quiet = quiet
        self.device = device  # the resolved --device, named when a model is loaded
        self.progress = progress_bar(disable=quiet or not err.is_terminal)
        self.task = None
        self.started = False
        self._err = err
        self._generate_reporters: list = []
        self.lines = line_progress("ablate", quiet)

    def generate_reporter(self) -> Any:
        if self.quiet:
            return _Silent()
        rep = RichReporter(quiet=self.quiet, device=self.device)
        self._generate_reporters.append(rep)  # closed with this one: no stale bars below the results
        return rep

    def stage(self, description: str, total: int) -> None:
        if not self.started:
            self.progress.start()
            self.started = True
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task(description, total=total)
        if self.lines:
            self.lines.line(description)

    def advance(self, n: int = 1) -> None:
        if self.task is not None:
            self.progress.advance(self.task, n)

    def note(self, message: str) -> None:
        if not self.quiet:
            self._err.print(message, highlight=False, markup=False)

    def done(self) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None

    def close(self) -> None:
        for rep in self._generate_reporters:
            rep.close()
        if self.started:
            self.progress.stop()


class _Silent:
    def __getattr__(self, name: str):
        return lambda *a, **k: None


def _help() -> str:
    """The command's help; the studies' kinds are read from the registry of kinds."""
    from ..ablate.kinds import KINDS

    kinds = ", ".join(f"{k.name} ({k.about})" for k in KINDS.values())
    return ("Run an ablation study: generate what is missing, score it, write <out>/<study>.md and .json (and plots).\n\n"
            f"Studies: {kinds}.\nComplete runs and captures are reused, so a rerun only writes the outputs again.\n\n"
            "Many processes: `torchrun --nproc-per-node N -m lowbit_video ablate ...` splits the runs (or captures) over "
            "the N ranks; rank 0 writes the outputs when all are done.")


def register(app: typer.Typer) -> None:
    class _AblateCommand(GreedyCommand):
        greedy = ("--seeds",)

    @app.command("ablate", cls=_AblateCommand, help=_help())
    @user_errors
    def ablate(
        study: Optional[str] = typer.Argument(None, help="Study name (see --list) or a study TOML file."),
        list_: bool = typer.Option(False, "--list", help="List the studies (name, description, file) and exit."),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name (default: the study's)."),
        model_path: Optional[str] = typer.Option(None, "--model-path", help="Diffusers-format checkpoint folder (real models; offline), as for generate: without --model, any text-, image- or video-to-video pipeline folder, run as its pipeline class."),
        image: Optional[str] = typer.Option(None, "--image", help="Conditioning image of an image-to-video pipeline folder (as for generate): every run of the study is conditioned on it."),
        video: Optional[str] = typer.Option(None, "--video", help="Conditioning video of a video-to-video pipeline folder (as for generate --video), likewise."),
        prompts: Optional[str] = typer.Option(None, "--prompts", help="Prompt file (default: the study's), or VBench's suite: `vbench` or `vbench:<dimension>` (as for generate)."),
        prompt_limit: Optional[int] = typer.Option(None, "--prompt-limit", help="At most N prompts (as for generate)."),
        seeds: Optional[list[str]] = typer.Option(None, "--seeds", metavar="<list[int]>", help="Seeds, e.g. --seeds 0 1 2 or 0,1,2 (default: the study's)."),
        steps: Optional[int] = typer.Option(None, "--steps", help="Denoising steps (default: the study's, else the model's)."),
        out_dir: Path = typer.Option(Path("runs"), "--out", help="Output root: runs as `generate --out`, captures under captures/, the study's .md/.json/.png at the top."),
        device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
        weights_dir: Optional[str] = typer.Option(None, "--weights-dir", help="Metric weights folder (table3; see `lowbit-video weights check`)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or notes."),
        shard: Optional[str] = typer.Option(None, "--shard", help="Make and score only shard i of n of the study's runs or captures (i counts from 0; cluster array jobs) and write no study outputs; a final run without --shard reuses everything and writes them. Under torchrun the rank picks the shard and rank 0 writes the outputs."),
        as_json: bool = JsonOpt,
    ) -> None:
        import sys

        from ..ablate import KINDS, AblateOptions, load_study, run_study
        from ..distributed import ShardSpec
        from ..errors import UserError

        if list_:
            from ..ablate.studies import load_all_studies, study_dirs

            good, broken = load_all_studies()
            if not good and not broken:
                raise UserError(f"no studies found (looked in {', '.join(str(d) for d in study_dirs())})")
            rows, errors = [s.row() for s in good], [str(e) for e in broken]
            if as_json:
                print_json({"studies": rows, "errors": errors})
                report_broken(errors)
                return
            from rich.table import Table

            table = Table(title="ablation studies (recipes/ablations/)")
            for col in ("name", "kind", "description", "file"):
                table.add_column(col, overflow="fold")
            for r in rows:
                table.add_row(r["name"], r["kind"], r["description"], short_path(r["file"]))
            out.print(table)
            report_broken(errors)
            return
        if not study:
            raise UserError("name a study (see `lowbit-video ablate --list`)")
        if steps is not None and steps <= 0:
            raise UserError(f"--steps must be positive, got {steps}")
        from ..devices import resolve_device

        device = resolve_device(device)
        loaded = load_study(study)
        spec = ShardSpec.from_cli_or_env(shard)
        opts = AblateOptions(model=model, model_path=model_path, image=image, video=video, prompts=prompts,
                             prompt_limit=prompt_limit,
                             seeds=_seeds(seeds), steps=steps, out=str(out_dir),
                             device=device, weights_dir=weights_dir, shard=spec)
        # under torchrun only rank 0 draws progress and prints the result; the others print one line
        talk = spec.is_main or not spec.launched
        reporter = _CliReporter(quiet or not talk, device=device)
        try:
            result = run_study(loaded, opts, reporter)
        finally:
            reporter.close()
        if not result["files"]:  # this process did its share only (a torchrun rank > 0, or --shard i/n)
            prefix = f"[rank {spec}] " if spec.launched else f"[shard {spec}] "
            if as_json and talk:
                print_json(result)
                return
            done = (f"generated {result['generated']} runs, scored {result['evaluated']}" if "generated" in result
                    else "captures made")
            rest = "" if spec.launched else "; once every shard is done, run the same command without --shard to write the study's outputs"
            print(f"{prefix}{study}: {done} (this process's share){rest}", file=sys.stderr)
            return
        if as_json:
            print_json(result)
            return
        out.print(KINDS[loaded.kind].render(result), highlight=False, markup=False)
        err.print("wrote " + ", ".join(short_path(f) for f in result["files"]), highlight=False, markup=False)

