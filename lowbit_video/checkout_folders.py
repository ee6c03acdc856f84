"""The package's folders that a source checkout keeps beside it, importable without an install that maps them.

pyproject.toml ships three top-level folders of the repository inside the package (its `package-dir` table:
kernels/ as lowbit_video.kernels, recipes/ and prompts/ as lowbit_video.data.recipes and .prompts). A wheel holds
them in place and an editable install's finder maps them. Python started in a checkout's root without such an
install of that checkout (`python -m lowbit_video` there beside a regular install elsewhere, which the current
directory shadows, or PYTHONPATH naming the checkout) imports the checkout's lowbit_video/ and would not find
them: every command would end in a ModuleNotFoundError. `install` adds a finder that maps them from
pyproject.toml's own table; it comes after every other finder, so an install of the package keeps precedence.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

PACKAGE = "lowbit_video"


class CheckoutFolders(importlib.abc.MetaPathFinder):
    """Finds the packages pyproject.toml's package-dir maps to folders outside lowbit_video/ (read on first use)."""

    def __init__(self, root: str):
        self.root = root
        self._folders: dict[str, str] | None = None

    def folders(self) -> dict[str, str]:
        """{package name: folder} for the mapped packages other than lowbit_video itself."""
        if self._folders is None:
            import tomllib

            with open(os.path.join(self.root, "pyproject.toml"), "rb") as f:
                table = tomllib.load(f).get("tool", {}).get("setuptools", {}).get("package-dir", {})
            self._folders = {name: os.path.join(self.root, folder) for name, folder in table.items()
                             if name != PACKAGE}
        return self._folders

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(PACKAGE + "."):
            return None
        folder = self.folders().get(name)
        init = folder and os.path.join(folder, "__init__.py")
        if not init or not os.path.isfile(init):
            return None
        return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[folder])


def install(package_dir: str) -> None:
    """Add the finder when `package_dir` (lowbit_video/ as imported) lies in a checkout of this project whose
    mapped folders it does not hold; otherwise (a wheel, a zip, an installed folder) do nothing."""
    root = os.path.dirname(package_dir)
    if os.path.isdir(os.path.join(package_dir, "kernels")) or not os.path.isfile(os.path.join(root, "pyproject.toml")):
        return
    if not any(isinstance(f, CheckoutFolders) for f in sys.meta_path):
        sys.meta_path.append(CheckoutFolders(root))
