"""Where study files are: recipes/ablations/<name>.toml under each recipe folder (files under
ablations/base/ are included by studies, not studies themselves)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..recipes import file_stem, toml_files

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def study_dirs() -> list["Traversable"]:
    """ablations/ under each recipe folder: $LOWBIT_VIDEO_RECIPES entries first, then the shipped recipes."""
    from ..recipes import recipe_dirs  # looked up at each call: a test may swap the recipe folders

    return [d.joinpath("ablations") for d in recipe_dirs()]


def available_studies() -> dict[str, "Traversable"]:
    """Study name -> file; a name in an earlier folder hides the same name in later ones."""
    found: dict[str, Traversable] = {}
    for d in study_dirs():
        for file in toml_files(d):
            found.setdefault(file_stem(file), file)
    return found
