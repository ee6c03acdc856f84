"""`lowbit-video recipes`, `lowbit-video recipes validate` and `lowbit-video recipes schema`."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.table import Table

from .common import JsonOpt, out, print_json, report_broken, short_path, user_errors

recipes_app = typer.Typer(help="List attention recipes (recipes/*.toml), validate recipe files, or show the keys and their valid values.")


def register(app: typer.Typer) -> None:
    app.add_typer(recipes_app, name="recipes")


@recipes_app.callback(invoke_without_command=True)
@user_errors
def recipes(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """List the recipes: name, one-line description, source file."""
    if ctx.invoked_subcommand is not None:
        return
    from ..errors import UserError
    from ..recipes import load_all, recipe_dirs

    good, broken = load_all()
    if not good and not broken:
        raise UserError(f"no recipes found (looked in {', '.join(str(d) for d in recipe_dirs())})")
    rows = [{"name": r.name, "description": r.description, "file": r.source} for r in good]
    errors = [str(e) for e in broken]
    if as_json:
        print_json({"recipes": rows, "errors": errors})
    else:
        table = Table(title="recipes")
        for col in ("name", "description", "file"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(r["name"], r["description"], short_path(r["file"]))
        out.print(table)
    report_broken(errors)


@recipes_app.command("validate")
@user_errors
def recipes_validate(
    paths: list[Path] = typer.Argument(..., help="Recipe TOML files to check."),
    as_json: bool = JsonOpt,
) -> None:
    """Check recipe files against the schema; one line per file, non-zero exit if any is invalid."""
    from ..errors import RecipeError
    from ..recipes import load_recipe

    results = []
    for path in paths:
        try:
            recipe = load_recipe(str(path) if str(path).endswith(".toml") else path)
            results.append({"file": str(path), "ok": True, "name": recipe.name, "error": None})
        except RecipeError as e:
            results.append({"file": str(path), "ok": False, "name": None, "error": str(e)})
    if as_json:
        print_json({"valid": all(r["ok"] for r in results), "files": results})
    else:
        for r in results:
            if r["ok"]:
                out.print(f"[green]ok[/green]    {r['file']} ({r['name']})", highlight=False)
            else:
                print(f"error: {r['error']}", file=sys.stderr)
    if not all(r["ok"] for r in results):
        raise typer.Exit(2)



@recipes_app.command("schema")
@user_errors
def recipes_schema(as_json: bool = JsonOpt) -> None:
    """Every key a recipe file may set and its valid values (what `recipes validate` checks)."""
    from ..recipes import SCHEMA

    if as_json:
        print_json({"fields": SCHEMA})
        return
    table = Table(title="recipe keys (<op>: q, k, v or p)")
    table.add_column("key", overflow="fold")
    table.add_column("valid values", overflow="fold")
    for key, valid in SCHEMA.items():
        table.add_row(key, valid)
    out.print(table)
