import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import tomllib


def test_every_subpackage_is_listed_in_pyproject(repo):
    listed = set(tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {"lowbit_video." + ".".join(p.parent.relative_to(repo / "lowbit_video").parts)
               for p in (repo / "lowbit_video").rglob("__init__.py")}
    on_disk = {n.rstrip(".") for n in on_disk} | {"lowbit_video.kernels"}
    assert on_disk == listed


def test_kernels_ships_under_lowbit_video_only(tmp_path):
    # From a neutral directory (as a user's script would run), `kernels` is not importable but
    # `lowbit_video.kernels` is.
    code = "import importlib.util as u; print(u.find_spec('kernels') is None, u.find_spec('lowbit_video.kernels') is not None)"
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["True", "True"]


def test_no_distribution_named_kernels_so_diffusers_probe_fails():
    # diffusers' _is_package_available("kernels") = find_spec + importlib.metadata.version("kernels").
    try:
        importlib.metadata.version("kernels")
        installed = True
    except importlib.metadata.PackageNotFoundError:
        installed = False
    assert not installed


def test_recipes_folder_is_data_not_a_module(repo):
    assert not (repo / "recipes" / "__init__.py").exists()
