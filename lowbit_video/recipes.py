"""Recipes are data: TOML files under recipes/, loaded into frozen, validated objects.

A recipe says what attention does numerically (rotation, smoothing, a quantizer per operand, where
the softmax tile is quantized) and which parts of a model keep 16-bit attention (its precision
policy). Recipe names are looked up in the folders of $LOWBIT_VIDEO_RECIPES, then in the recipes
shipped inside the package (lowbit_video/data: the same from a checkout, a wheel or a zip). Files may
`include` a base file: a path relative to the including file, else relative to a recipe folder
(`recipe_dirs`: so `include = "base/mxattention.toml"` works from any folder);
tables are merged key by key, the including file winning. Unknown keys and values out of range are
one-line errors that name the file, the key and the valid range (`SCHEMA` lists every field's; each
key is declared once, in lowbit_video/recipe_schema.py).
The name "fp16" is kept for the unquantized baseline: runs land in a folder named after the recipe,
and evaluate pairs every run with the one in the fp16 folder.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from .errors import RecipeError, UserError
# The schema's dataclasses and names are imported from here (`from lowbit_video.recipes import AttentionSpec`).
from .recipe_schema import (BASELINE_NAME, DEFAULT_BLOCK, MX_RULES, NON_ORTHOGONAL_ROTATIONS, OPERANDS, SCHEMA,
                            AttentionSpec, DraftSpec, DraftSpecError, OperandQuant, PrecisionPolicy, Recipe, in_qmax_range,
                            qmax_refusal)
from .toml_schema import Where, read_table, settings

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

MAX_NESTING = 64  # tables nested deeper than this are no recipe or study (the parser would recurse away)
T = TypeVar("T")


# ----------------------------------------------------------------------------------------- loading


def recipe_dirs() -> list["Traversable"]:
    """Where recipe names are looked up: $LOWBIT_VIDEO_RECIPES (os.pathsep-separated folders), then
    the recipes shipped with the package (`lowbit_video.data.recipes`: the repository's recipes/)."""
    from . import data

    dirs: list[Traversable] = [Path(p) for p in os.environ.get("LOWBIT_VIDEO_RECIPES", "").split(os.pathsep) if p]
    dirs.append(data.recipe_folder())
    return dirs


def toml_files(folder: "Traversable") -> list["Traversable"]:
    """The *.toml files at the top of `folder` (none when it is no folder), by name."""
    if not folder.is_dir():
        return []
    return sorted((f for f in folder.iterdir() if f.name.endswith(".toml") and f.is_file()), key=lambda f: f.name)


def file_stem(file: "Traversable") -> str:
    return file.name.rsplit(".", 1)[0] if "." in file.name else file.name


def available_recipes() -> dict[str, "Traversable"]:
    """Recipe name -> file, for every top-level *.toml in the recipe folders (bases live in base/);
    a name in an earlier folder hides the same name in later ones."""
    found: dict[str, Traversable] = {}
    for d in recipe_dirs():
        for file in toml_files(d):
            found.setdefault(file_stem(file), file)
    return found


def load_each(files: Mapping[str, "Traversable"], load: Callable[[Any], T]) -> tuple[list[T], list[UserError]]:
    """`load` of every file (in name order) that loads, and the one-line error of each one that does
    not: a broken file among good ones hides none of them (the recipe and study listings)."""
    good: list[T] = []
    broken: list[UserError] = []
    for _, file in sorted(files.items()):
        try:
            good.append(load(file))
        except UserError as e:
            broken.append(e)
    return good, broken


def load_all() -> tuple[list[Recipe], list[UserError]]:
    """Every available recipe that loads, and the error of each one that does not."""
    return load_each(available_recipes(), recipe_from_file)


def is_traversable(value: Any) -> bool:
    """A file handed over as an importlib.resources Traversable (e.g. inside a zip), not as a path."""
    return not isinstance(value, (str, os.PathLike)) and hasattr(value, "read_bytes") and hasattr(value, "joinpath")


def load_recipe(name_or_path: "str | os.PathLike | Recipe | Traversable") -> Recipe:
    """A recipe by name (e.g. "mxattention"), by path to a TOML file, or a file `available_recipes` listed."""
    if isinstance(name_or_path, Recipe):
        return name_or_path
    if is_traversable(name_or_path):
        return recipe_from_file(name_or_path)
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".toml") or path.exists():
        if not path.is_file():
            raise RecipeError(f"{text}: no such recipe file")
        return recipe_from_file(path)
    known = available_recipes()
    if text not in known:
        raise RecipeError(f"unknown recipe {text!r}; known recipes: {', '.join(sorted(known)) or 'none'}")
    return recipe_from_file(known[text])


def recipe_from_file(path: "Path | Traversable") -> Recipe:
    file = path if is_traversable(path) else Path(path)
    data = read_with_includes(file, seen=())
    return recipe_from_dict(data, source=str(file), default_name=file_stem(file))


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of tables and arrays, counted iteratively (no recursion to run out of)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            break
        if isinstance(v, Mapping):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def _read_toml(path: "Traversable") -> dict[str, Any]:
    too_deep = RecipeError(f"{path}: tables or arrays nested more than {MAX_NESTING} deep; not a recipe or study file")
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise RecipeError(f"{path}: is a folder, not a TOML file") from None
    except OSError as e:
        raise RecipeError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # TOML is UTF-8 text; a binary or Latin-1 file is no recipe
        line = raw[: e.start].count(b"\n") + 1
        raise RecipeError(f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}, line {line}); "
                          "a recipe or study is a TOML text file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:  # tomllib parses nested values recursively
        raise too_deep from None
    if _depth(data, MAX_NESTING) > MAX_NESTING:
        raise too_deep
    return data


def _join(folder: "Traversable", relative: str) -> "Traversable":
    """`folder` / `relative` ('/'-separated), one part at a time (all a Traversable promises)."""
    if isinstance(folder, Path):
        return folder / relative
    out = folder
    for part in (p for p in relative.split("/") if p and p != "."):
        out = out.joinpath(part)
    return out


def file_key(file: "Path | Traversable") -> str:
    """What identifies a file: its resolved path on disk, else (inside a zip) where it is in the archive."""
    return str(file.resolve()) if isinstance(file, Path) else str(file)


def _include_path(path: "Traversable", include: str) -> "Traversable":
    """The included file: relative to the including file, else to a recipe folder."""
    beside = getattr(path, "parent", None)  # pathlib and zip paths have one; a bare Traversable may not
    folders = ([beside] if beside is not None else []) + recipe_dirs()
    candidates = [_join(f, include) for f in folders]
    for c in candidates:
        if c.is_file():
            return c
    if candidates and candidates[0].is_dir():
        raise RecipeError(f"{path}: include: {candidates[0]} is a folder, not a TOML file")
    where = ", ".join(str(f) for f in folders)
    raise RecipeError(f"{path}: include: no file {include!r} beside it or in a recipe folder (looked in {where})")


def read_with_includes(path: "Path | Traversable", seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A TOML file with its `include` chain merged (the included file first, this one over it); shared
    by recipe and study files. `seen` (file_key of each file on the way) guards against include cycles."""
    if not is_traversable(path):
        path = Path(path)
    key = file_key(path)
    if key in seen:
        raise RecipeError(f"{path}: include cycle ({' -> '.join(seen + (key,))})")
    data = _read_toml(path)
    include = data.pop("include", None)
    if include is None:
        return data
    if not isinstance(include, str) or not include:
        raise RecipeError(f"{path}: include: expected a file path string")
    base = read_with_includes(_include_path(path, include), seen + (key,))
    return _deep_merge(base, data)


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# -------------------------------------------------------------------------------------- validation
# Each key's type, choices and range come from its declaration (lowbit_video/recipe_schema.py);
# what is checked here are the relations between keys.


def recipe_from_dict(data: Mapping[str, Any], *, source: str = "<dict>", default_name: str = "") -> Recipe:
    """Build and validate a Recipe; every problem is a RecipeError naming `source` and the key."""
    where = Where(source)
    top, values = read_table(where, data, "", Recipe, extra={"include"})
    name = values.get("name", default_name)
    if not name:
        raise where.error("name", "must be a non-empty string")
    attention = _attention_from_dict(where, top.get("attention", {}))
    if name == BASELINE_NAME and attention.kind != "dense":
        raise where.error("name", f"{BASELINE_NAME!r} is kept for the unquantized baseline (runs of a recipe land "
                          f"in a folder named after it, and evaluate pairs every run with the {BASELINE_NAME} one); "
                          f"name this {attention.kind} recipe otherwise")
    _, policy = read_table(where, top.get("policy", {}), "policy.", PrecisionPolicy)
    return Recipe(**{**values, "name": name}, attention=attention, policy=PrecisionPolicy(**policy), source=source)


def _attention_from_dict(where: Where, raw: Any) -> AttentionSpec:
    p = "attention."
    t, values = read_table(where, raw, p, AttentionSpec)
    spec = AttentionSpec(**values, **{o: _operand_from_dict(where, o, t.get(o, {})) for o in OPERANDS},
                         draft=_draft_from_dict(where, t["draft"]) if "draft" in t else None)
    if (spec.kind == "draft") != ("draft" in t):
        raise where.error(p + ("kind" if "draft" in t else "draft"), "kind = \"draft\" and an [attention.draft] table go together")
    if spec.kind == "draft" and set(t) - {"kind", "draft"}:
        extra = sorted(set(t) - {"kind", "draft"})[0]
        raise where.error(p + extra, "does not apply to kind 'draft' (its formats are fixed; see lowbit_video/attention/draft_exec.py)")
    sigma = spec.rotation_sigma
    if not (0.0 < sigma < float("inf")) or (sigma != 1.0 and spec.rotation not in NON_ORTHOGONAL_ROTATIONS):
        raise where.error(p + "rotation_sigma", f"must be {SCHEMA['attention.rotation_sigma']}, got {sigma} "
                                                f"(rotation = {spec.rotation!r})")
    if spec.kind == "dense" and spec.quantized:
        raise where.error(p + "kind", "'dense' recipes cannot quantize operands; use kind = \"quantized\"")
    if spec.kind == "quantized" and not spec.quantized:
        raise where.error(p + "kind", "'quantized' recipe quantizes no operand (set attention.q/k/v/p.format)")
    p_block = spec.p.block_size if (spec.p.enabled and spec.p.granularity == "block") else 1
    if spec.tile_k <= 0 or spec.tile_k % p_block:
        raise where.error(p + "tile_k", f"must be a positive multiple of the P̃ block ({p_block}), got {spec.tile_k}")
    return spec


def _draft_from_dict(where: Where, raw: Any) -> DraftSpec:
    p = "attention.draft."
    _, values = read_table(where, raw, p, DraftSpec)
    shares = ("fp16", "int8", "nvfp4")
    if any(name in values for name in shares):  # shares not written are 0 once any is written (all 16 bit when none is)
        values = {**{name: 0.0 for name in shares}, **values}
    try:
        return DraftSpec(**values)
    except DraftSpecError as e:
        raise where.error(p + e.key, e.message) from None


def _operand_from_dict(where: Where, name: str, raw: Any) -> OperandQuant:
    prefix = f"attention.{name}."
    t, values = read_table(where, raw, prefix, OperandQuant, operand=name)
    op = OperandQuant(**values)
    fmt = op.format
    if fmt in DEFAULT_BLOCK and op.block_size != DEFAULT_BLOCK[fmt]:
        raise where.error(prefix + "block", f"{fmt.upper()} blocks are {DEFAULT_BLOCK[fmt]} elements")
    if fmt in DEFAULT_BLOCK and op.granularity != "block":
        raise where.error(prefix + "granularity", f"{fmt} is block-scaled; granularity must be 'block'")
    if op.granularity == "per_thread" and op.group % 8:
        raise where.error(prefix + "group", f"per_thread splits each block of `group` keys into 4 groups of pairs "
                                            f"of every 8 keys: a multiple of 8, got {op.group}")
    if op.outer_scale == "row" and name != "p":
        raise where.error(prefix + "outer_scale", "'row' (two-level P̃ scaling) applies to attention.p only")
    for key, s, _ in settings(OperandQuant):
        if key in t and s.only and fmt not in s.only:
            raise where.error(prefix + key, f"does not apply to format {fmt!r}")
    if "qmax" in t and op.rule != "uos":
        raise where.error(prefix + "qmax", "only the 'uos' rule takes a qmax")
    return op


def check_qmax(where: "Where", key: str, q: float) -> None:
    """RecipeError unless `q` is a meaningful UOS boundary (shared with the studies that take one)."""
    if not in_qmax_range(q):
        raise where.error(key, qmax_refusal(q))


__all__ = ["BASELINE_NAME", "MX_RULES", "OPERANDS", "SCHEMA", "AttentionSpec", "DraftSpec", "DraftSpecError", "OperandQuant",
           "PrecisionPolicy", "Recipe", "available_recipes", "check_qmax", "file_key", "file_stem", "is_traversable",
           "load_all", "load_each", "load_recipe", "read_with_includes", "recipe_dirs", "recipe_from_dict", "recipe_from_file",
           "toml_files"]
