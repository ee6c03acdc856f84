"""`lowbit-video evaluate` (placeholder until the evaluation issue lands; replaced by its owner)."""

from __future__ import annotations

import sys

import typer


def register(app: typer.Typer) -> None:
    @app.command("evaluate", help="(Not available yet: lands with the evaluation issue (#5).)",
                 context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def command(ctx: typer.Context) -> None:
        print("error: `lowbit-video evaluate` is not available yet; it lands with the evaluation issue (#5)", file=sys.stderr)
        raise typer.Exit(2)
