"""`lowbit-video models`: the models generate can run, the diffusers video transformer families a recipe reaches,
and (`--coverage`) which recipes run on each class the installed diffusers exports."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ..errors import UserError
from ..runstore import check_output
from .common import JsonOpt, out, print_json, user_errors

COVERAGE_COMMAND = "lowbit-video models --coverage --out results/models-coverage.md"


def register(app: typer.Typer) -> None:
    app.command("models")(models)


@user_errors
def models(as_json: bool = JsonOpt,
           families: bool = typer.Option(False, "--families", help="List the diffusers video transformer classes "
                                         "and what the facts table knows of each (block lists, patch, RoPE, text "
                                         "position), which is what draft recipes need."),
           coverage: bool = typer.Option(False, "--coverage", help="Run sage2-int8 and mxattention through "
                                         "use_recipe on a tiny random-weight instance of every video transformer "
                                         "class of the installed diffusers (CPU, about two minutes) and report per "
                                         "class what runs."),
           out_path: Path | None = typer.Option(None, "--out", help="With --coverage: also write the table as "
                                                "markdown to this file (e.g. results/models-coverage.md).")) -> None:
    """List the models: name, family, where the weights come from, default steps and size; with --json also the
    prompt vocabulary of models with a closed grammar (tiny-shapes). Any diffusers text-to-video pipeline folder
    also runs with `generate --model-path DIR`. --families / --coverage: the diffusers video transformers a recipe
    reaches."""
    if out_path is not None and not coverage:
        raise UserError("--out writes the --coverage table: give --coverage too")
    if coverage:
        if out_path is not None:
            check_output(out_path, "--out", is_dir=False)  # before the two-minute run, not after it
        return _coverage(as_json, out_path)
    if families:
        return _families(as_json)
    from dataclasses import asdict

    from ..models.registry import FOLDER_NOTE, list_models
    from ..models.tiny_shapes.grammar import vocabulary_by_role

    rows = [asdict(m) for m in list_models()]
    for m in rows:
        if m["family"] == "tiny-shapes":
            m["prompt_vocabulary"] = vocabulary_by_role()
    if as_json:
        print_json({"models": rows, "pipeline_folders": FOLDER_NOTE})
        return
    _print_table("models", ("name", "family", "weights", "steps", "size (frames x H x W)", "description"),
                 [(m["name"], m["family"], str(m["weights"]), str(m["default_steps"]),
                   f"{m['default_frames']} x {m['default_height']} x {m['default_width']}", m["description"])
                  for m in rows])
    out.print(f"And {FOLDER_NOTE}; `lowbit-video models --families` lists the transformer families a recipe "
              "reaches.", highlight=False, markup=False)


def _print_table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    out.print(table)


def _families(as_json: bool) -> None:
    from ..models.families import FACTS, grid_refusal
    from ..models.tiny_video_cases import video_transformer_classes

    rows = []
    for name in video_transformer_classes():
        f = FACTS.get(name)
        why = grid_refusal(f)
        rows.append({"class": name, "family": f.name if f else None, "blocks": list(f.blocks) if f else None,
                     "text": f.text if f else None, "masks": f.masks if f else None,
                     "recipes": "every non-draft recipe" if why else "every recipe",
                     "draft": f"no: {why}" if why else "yes"})
    if as_json:
        print_json({"families": rows})
        return
    _print_table("diffusers video transformers", ("class", "family", "blocks", "text", "recipes", "draft"),
                 [(r["class"], r["family"] or "-", ", ".join(r["blocks"] or ["(found from the module tree)"]),
                   r["text"] or "?", r["recipes"], r["draft"]) for r in rows])


def _coverage(as_json: bool, out_path: Path | None) -> None:
    import warnings

    from .. import runstore
    from ..models.coverage import coverage_markdown, coverage_rows, draft_support, row_ok, why_not

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # diffusers' and the recipes' notes per class; the table says what matters
        rows = coverage_rows()
    md = coverage_markdown(rows, COVERAGE_COMMAND)
    if out_path is not None:
        runstore.atomic_write_bytes(out_path, md.encode())
    if as_json:
        for r in rows:
            r.pop("traceback", None)
            r["supported"] = {k: row_ok(r, k) for k in r["recipes"]}
            r["why_not"] = {k: why_not(r, k) for k in r["recipes"] if not row_ok(r, k)}
            r["draft"] = draft_support(r)
        print_json({"coverage": rows, "out": str(out_path) if out_path else None})
        return
    out.print(md)
