"""`lowbit-video models`: the models generate can run."""

from __future__ import annotations

import typer
from rich.table import Table

from .common import JsonOpt, out, print_json, user_errors


def register(app: typer.Typer) -> None:
    app.command("models")(models)


@user_errors
def models(as_json: bool = JsonOpt) -> None:
    """List the models: name, family, where the weights come from, default steps and size; with --json also the
    prompt vocabulary of models with a closed grammar (tiny-shapes)."""
    from dataclasses import asdict

    from ..models.registry import list_models
    from ..models.tiny_shapes.grammar import vocabulary_by_role

    rows = [asdict(m) for m in list_models()]
    for m in rows:
        if m["family"] == "tiny-shapes":
            m["prompt_vocabulary"] = vocabulary_by_role()
    if as_json:
        print_json({"models": rows})
        return
    table = Table(title="models")
    for col in ("name", "family", "weights", "steps", "size (frames x H x W)", "description"):
        table.add_column(col, overflow="fold")
    for m in rows:
        table.add_row(m["name"], m["family"], str(m["weights"]), str(m["default_steps"]),
                      f"{m['default_frames']} x {m['default_height']} x {m['default_width']}", m["description"])
    out.print(table)

