"""The `lowbit-video` command line. Thin: parse, call the library, render with rich.

Every reporting command takes --json and then prints exactly one JSON object on stdout. User
mistakes (bad recipe files, unknown names, unusable shapes, NaN/Inf inputs) are one line on stderr
and exit code 2, without a traceback.

One module per command group, each with register(app); common.py holds what they share. This module
only builds the app: the order of the register calls is the order of the commands in --help.
"""

from __future__ import annotations

import typer

from .. import __version__
from . import ablate, adherence, bench, compare, diagnose, evaluate, generate, models, profile, recipes, train_tiny
from .common import OneLineErrors

app = typer.Typer(
    cls=OneLineErrors,
    help="4-bit and mixed-precision attention for video diffusion transformers: run recipes, "
    "inspect their numerics, score videos against paired FP16 runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def version_callback(value: bool) -> None:
    if value:
        print(f"lowbit-video {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True, help="Show the version and exit."),
) -> None:
    pass


for _module in (recipes, diagnose, train_tiny, generate, profile, models, adherence, evaluate, compare, ablate, bench):
    _module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
