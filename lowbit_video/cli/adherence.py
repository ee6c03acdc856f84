"""`lowbit-video adherence`: prompt adherence of tiny-shapes runs."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.table import Table

from ..errors import UserError
from .common import JsonOpt, out, print_json, user_errors


def register(app: typer.Typer) -> None:
    app.command("adherence")(adherence)


@user_errors
def adherence(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories, or folders above them (searched)."),
    as_json: bool = JsonOpt,
) -> None:
    """Prompt adherence of tiny-shapes runs (colour, motion, shape detected from the pixels).

    Reads each run's exact frames (frames.npz; else the PNG strip; else the decoded mp4) and the prompt in meta.json. Runs of other models and two-object prompts are skipped with a note on stderr.
    """
    from ..generate import adherence as score_runs

    res = score_runs(run_dirs)
    for s in res["skipped"]:
        print(f"note: skipped {s['dir']}: {s['reason']}", file=sys.stderr)
    if res["n"] == 0:
        raise UserError(f"no tiny-shapes runs to score under {', '.join(map(str, run_dirs))} "
                        f"({len(res['skipped'])} skipped)")
    summary = {k: res[k] for k in ("color_accuracy", "motion_accuracy", "shape_accuracy", "n")}
    summary["skipped"] = len(res["skipped"])
    summary["by_recipe"] = res["by_recipe"]
    if as_json:
        print_json(summary)
        return
    table = Table(title=f"prompt adherence · {res['n']} runs")
    for col in ("recipe", "colour", "motion", "shape", "n"):
        table.add_column(col, justify="left" if col == "recipe" else "right")
    rows = list(res["by_recipe"].items()) + ([("all", summary)] if len(res["by_recipe"]) != 1 else [])
    for name, acc in rows:
        table.add_row(name, *(f"{100 * acc[k]:.1f}%" for k in ("color_accuracy", "motion_accuracy", "shape_accuracy")),
                      str(acc["n"]))
    out.print(table)

