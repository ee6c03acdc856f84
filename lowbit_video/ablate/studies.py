"""Ablation studies are data: recipes/ablations/<name>.toml, loaded into frozen, validated objects.

A study file names its `kind` (one of kinds.KINDS), the run defaults the CLI options override
([run]), the kind's own table (kinds.KINDS[kind].section; [capture] for the kinds that read
captured Q/K/V) and the paper's numbers for reference ([[paper_rows]], copied into the output as
they are). `include = "base/x.toml"` merges a base file first (the including file wins), exactly as
recipes do; files under base/ are not studies. Problems are one-line errors naming the file and the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import UserError
from ..recipes import file_stem, is_traversable, load_each, read_with_includes  # shared include/merge
from ..toml_schema import Where
from .kinds import KINDS
from .study import Study, read_capture, read_run
from .study_files import available_studies, study_dirs

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

_SHARED = {"name", "kind", "description", "paper", "notes", "run", "capture", "paper_rows"}


def list_studies() -> list[Study]:
    return [load_study(p) for p in available_studies().values()]


def load_all_studies() -> tuple[list[Study], list[UserError]]:
    """Every available study that loads, and the error of each one that does not."""
    return load_each(available_studies(), study_from_file)


def load_study(name_or_path: "str | os.PathLike | Traversable | Study") -> Study:
    """A study by name, by path to a TOML file, or a file `available_studies` listed (a Study is itself)."""
    if isinstance(name_or_path, Study):
        return name_or_path
    if is_traversable(name_or_path):
        return study_from_file(name_or_path)
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".toml"):
        if not path.is_file():
            raise UserError(f"{text}: no such study file")
        return study_from_file(path)
    known = available_studies()
    if text not in known:
        raise UserError(f"unknown study {text!r}; known studies: {', '.join(sorted(known)) or 'none'}")
    return study_from_file(known[text])


def study_from_file(path: "Path | Traversable") -> Study:
    file = path if is_traversable(path) else Path(path)
    data = read_with_includes(file, seen=())
    return study_from_dict(data, source=str(file), default_name=file_stem(file))


def study_from_dict(data: Mapping[str, Any], *, source: str = "<dict>", default_name: str = "") -> Study:
    w = Where(source)
    top = w.table(data, "", _SHARED | {k.section for k in KINDS.values()})
    kind = KINDS[w.choice(top, "kind", tuple(KINDS), "", "")]
    for other in KINDS.values():
        if other.section != kind.section and other.section in top:
            raise w.error(other.section, f"does not apply to kind {kind.name!r}")
    if not kind.captures and "capture" in top:
        raise w.error("capture", f"does not apply to kind {kind.name!r}")
    name = w.scalar(top, "name", str, default_name)
    if not name:
        raise w.error("name", "must be a non-empty string")
    capture = read_capture(w, top.get("capture", {})) if kind.captures else None
    params = kind.parameters(w, kind.section + ".", top.get(kind.section, {}), capture)
    rows = top.get("paper_rows", [])
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise w.error("paper_rows", "expected an array of tables ([[paper_rows]])")
    return Study(name=name, kind=kind.name, description=w.scalar(top, "description", str, ""), file=source,
                 run=read_run(w, top.get("run", {})), params=params, paper=w.scalar(top, "paper", str, ""),
                 paper_rows=tuple(dict(r) for r in rows), notes=w.scalar(top, "notes", str, ""))


__all__ = ["Study", "available_studies", "list_studies", "load_all_studies", "load_study", "study_dirs", "study_from_dict",
           "study_from_file"]
