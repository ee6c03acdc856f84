"""The files the package ships: recipe and study TOMLs, and the prompt sets.

They live at the top of the repository (recipes/, prompts/); pyproject.toml maps those folders to the
packages `lowbit_video.data.recipes` and `lowbit_video.data.prompts`, so `importlib.resources` finds
them the same way in a checkout (editable install), an installed wheel and a zip on sys.path. They are
Traversables, not paths (a file inside a zip has none): read them with `iterdir`, `joinpath`,
`read_bytes`, or `importlib.resources.as_file` where a real file is needed. (The functions are not
named after the packages: importing lowbit_video.data.recipes sets the module attribute `recipes`.)
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

from ..errors import UserError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

PROMPT_SUFFIX = ".txt"
PROMPTS_FOLDER = "prompts/"  # a shipped set may be named by its path in the repository: prompts/smoke.txt


def _package(name: str) -> "Traversable":
    try:
        return files(f"{__name__}.{name}")
    except ModuleNotFoundError:
        # an editable install made before pyproject.toml mapped the folder has no entry for it
        raise UserError(f"the shipped {name} are not importable as {__name__}.{name}; "
                        "reinstall the package (pip install -e . in a checkout)") from None


def recipe_folder() -> "Traversable":
    """The shipped recipe folder: recipes at its top, include bases in base/, studies in ablations/."""
    return _package("recipes")


def prompt_folder() -> "Traversable":
    """The shipped prompt-set folder: one prompt per line, '#' comments."""
    return _package("prompts")


def prompt_sets() -> dict[str, "Traversable"]:
    """Shipped prompt-set name (the file name without .txt, e.g. "smoke") -> its file."""
    return {p.name[: -len(PROMPT_SUFFIX)]: p for p in sorted(prompt_folder().iterdir(), key=lambda p: p.name)
            if p.name.endswith(PROMPT_SUFFIX) and p.is_file()}


def prompt_set(text: str) -> "Traversable | None":
    """The shipped prompt set `text` names, by name ("smoke") or by its repository path
    ("prompts/smoke.txt"); None when it names none."""
    name = text
    if text.startswith(PROMPTS_FOLDER) and text.endswith(PROMPT_SUFFIX):
        name = text[len(PROMPTS_FOLDER): -len(PROMPT_SUFFIX)]
    if not name or "/" in name or "\\" in name:
        return None
    return prompt_sets().get(name)


__all__ = ["prompt_folder", "prompt_set", "prompt_sets", "recipe_folder"]
