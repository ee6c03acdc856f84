"""`lowbit-video compare`: tables (and plots) of scored runs, per model, as in the MXAttention paper's Table 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .common import JsonOpt, out, user_errors


def register(app: typer.Typer) -> None:
    @app.command("compare")
    @user_errors
    def compare(
        run_dirs: list[Path] = typer.Argument(..., help="Run directories, or folders above them (searched for complete runs)."),
        baseline: str = typer.Option("fp16", "--baseline", help="Recipe the paired metrics are measured against."),
        fmt: Optional[str] = typer.Option(None, "--format", help="table, md, csv or json (default: table; with --out, from the file's suffix .md/.csv/.json)."),
        out_file: Optional[Path] = typer.Option(None, "--out", help="Write the rendered table to this file (atomically) instead of stdout."),
        plots: Optional[Path] = typer.Option(None, "--plots", help="Write PNG plots here: metric bars per model, frame grids of FP16 beside each recipe."),
        grid: Optional[list[str]] = typer.Option(None, "--grid", help="Frame grid for PROMPT[:SEED] (exact prompt, its slug, or a substring); repeat for several. Default: the first --grid-count pairs."),
        grid_count: int = typer.Option(3, "--grid-count", min=0, help="Frame grids per model when --grid is not given."),
        grid_frames: int = typer.Option(6, "--grid-frames", min=1, help="Frames (columns) per frame grid, evenly spaced."),
        as_json: bool = JsonOpt,
    ) -> None:
        """Compare scored runs: one table per model, rows = the baseline then each recipe, columns = VBench dimensions then Cosine/SSIM/PSNR/LPIPS against the baseline (and adherence for tiny-shapes).

        Each recipe's row averages its runs over the (prompt, seed) pairs that have a baseline run (n says how many). Runs need metrics.json from `lowbit-video evaluate`; runs without one are left out with a warning. The best quantized value per column is marked (LPIPS: lowest; else highest).
        """
        from ..compare import FORMATS, collect, render, render_table
        from ..errors import UserError
        from ..runstore import atomic_write_bytes, check_output

        if fmt is not None and fmt not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        if as_json and fmt not in (None, "json"):
            raise UserError(f"--json means --format json; it conflicts with --format {fmt}")
        if as_json:
            fmt = "json"
        elif fmt is None:
            suffix = out_file.suffix.lower().lstrip(".") if out_file is not None else ""
            fmt = {"md": "md", "markdown": "md", "csv": "csv", "json": "json"}.get(suffix, "table")
        # where the outputs go, checked before anything is read (a file, /proc, a read-only mount)
        if out_file is not None:
            check_output(out_file, "--out", is_dir=False)
        if plots is not None:
            check_output(plots, "--plots")

        comp = collect(run_dirs, baseline=baseline)
        for w in comp.warnings:
            print(f"warning: {w}", file=sys.stderr)

        extra = {}
        if plots is not None:
            from ..plots import write_plots

            written = write_plots(comp, plots, picks=grid or None, count=grid_count, frames=grid_frames)
            extra["plots"] = [str(p) for p in written]
            print(f"wrote {len(written)} plot{'s' * (len(written) != 1)} to {plots}", file=sys.stderr)

        if out_file is not None:
            atomic_write_bytes(out_file, render(comp, fmt, extra).encode())
            print(f"wrote {out_file} ({fmt})", file=sys.stderr)
            if as_json:
                sys.stdout.write(render(comp, "json", extra))
            return
        if fmt == "table":
            for item in render_table(comp, marker="" if out.is_terminal else "*"):
                out.print(item, highlight=False)
            return
        sys.stdout.write(render(comp, fmt, extra))
