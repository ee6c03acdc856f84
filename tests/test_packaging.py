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


# Checks of the repository as a whole, named after what they check rather than after one module.
WHOLE_REPO_TESTS = {"test_packaging", "test_import_graph"}


def _module_stems(repo: Path) -> set[str]:
    """lowbit_video/models/tiny_shapes/grammar.py -> "models_tiny_shapes_grammar" (and every package on the way:
    "models", "models_tiny_shapes"); kernels/ counts as "kernels", benchmarks/ scripts and results/ by their folder."""
    stems = {"benchmarks", "results", "kernels"}
    for root, prefix in ((repo / "lowbit_video", ()), (repo / "kernels", ("kernels",)), (repo / "benchmarks", ("benchmarks",))):
        for path in root.rglob("*.py"):
            parts = [*prefix, *path.relative_to(root).with_suffix("").parts]
            parts = [p.lstrip("_") for p in parts if p != "__init__"]
            stems.update("_".join(parts[:i]) for i in range(1, len(parts) + 1))
    return stems


def test_every_test_file_is_named_after_the_module_it_tests(repo):
    # A reader finds the tests of lowbit_video/X/Y.py in tests/test_X_Y.py (or tests/test_X_Y_<aspect>.py).
    stems = _module_stems(repo)
    unnamed = [p.name for p in sorted((repo / "tests").glob("test_*.py"))
               if p.stem not in WHOLE_REPO_TESTS
               and not any(p.stem[5:] == s or p.stem[5:].startswith(s + "_") for s in stems)]
    assert not unnamed, f"test files not named after a module of the package: {unnamed}"
