import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib


def _setuptools(repo: Path) -> dict:
    return tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_subpackage_and_data_folder_is_listed_in_pyproject(repo):
    # Every folder under a package-dir root that holds code or data must be a listed package: setuptools
    # leaves out (and warns about) a data folder that is not listed, so a shipped file would go missing.
    cfg = _setuptools(repo)
    on_disk = set()
    for name, folder in cfg["package-dir"].items():
        root = repo / folder
        for d in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            if "__pycache__" not in d.parts and any(f.is_file() for f in d.iterdir()):
                on_disk.add(".".join([name, *d.relative_to(root).parts]))
    assert on_disk == set(cfg["packages"])


def test_shipped_data_folders_map_to_the_top_level_folders(repo):
    # recipes/ and prompts/ stay at the top of the repository and ship inside lowbit_video
    dirs = _setuptools(repo)["package-dir"]
    assert dirs["lowbit_video.data.recipes"] == "recipes" and dirs["lowbit_video.data.prompts"] == "prompts"


def _folder(repo: Path, cfg: dict, package: str) -> Path:
    """Where setuptools reads `package` from: the longest package-dir entry above it, plus the rest."""
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in cfg["package-dir"]:
            return repo / cfg["package-dir"][".".join(parts[:i])] / "/".join(parts[i:])
    return repo / "/".join(parts)


def test_every_shipped_data_file_is_matched_by_package_data(repo):
    cfg = _setuptools(repo)
    for name, patterns in cfg["package-data"].items():
        assert all(list(_folder(repo, cfg, name).glob(p)) for p in patterns), f"{name}: {patterns} match no file"
    for name, folder in cfg["package-dir"].items():
        if name.startswith("lowbit_video.data."):
            for f in (repo / folder).rglob("*"):
                if f.is_file() and f.suffix != ".py" and not f.name.startswith(".") and "__pycache__" not in f.parts:
                    package = ".".join([name, *f.parent.relative_to(repo / folder).parts])
                    assert any(f.match(p) for p in cfg["package-data"].get(package, [])), f


@pytest.mark.parametrize("top", ["kernels", "recipes", "prompts"])
def test_top_level_folders_ship_under_lowbit_video_only(repo, tmp_path, top):
    # From a neutral directory (as a user's script would run), `kernels`, `recipes` and `prompts` are not
    # importable from this project's folders (a `kernels` found is Hugging Face's distribution, installed with
    # newer transformers, perhaps into a virtual environment inside the checkout); `lowbit_video.kernels` /
    # `lowbit_video.data.<folder>` are.
    inside = "lowbit_video.kernels" if top == "kernels" else f"lowbit_video.data.{top}"
    code = (f"import importlib.util as u, json; s = u.find_spec({top!r}); "
            f"print(json.dumps([[s.origin, *(s.submodule_search_locations or [])] if s else [], "
            f"u.find_spec({inside!r}) is not None]))")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    places, inside_found = json.loads(res.stdout)
    assert inside_found
    own = os.path.realpath(repo / top)
    assert not [p for p in places if p and (os.path.realpath(p) + os.sep).startswith(own + os.sep)], places


def _top_level_kernels_from_the_checkout_root(repo, pythonpath: str) -> list[str]:
    """What `import kernels` gives a `python -c` run in the checkout's root (which puts the root first on
    sys.path), without site-packages (-S) so that only `pythonpath` can hold a distribution of that name; and
    whether any module of this folder got imported under the top-level name."""
    code = ("import sys, kernels, importlib.metadata as m\n"
            "try:\n    print(kernels.WHO, m.version('kernels'))\n"
            "except AttributeError:\n    print('empty', kernels.__file__, kernels.__path__, dir(kernels) == "
            "['__doc__', '__file__', '__loader__', '__name__', '__package__', '__path__', '__spec__'])\n"
            "print(sorted(n for n in sys.modules if n.startswith('kernels.')))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    res = subprocess.run([sys.executable, "-S", "-c", code], cwd=repo, env=env, capture_output=True, text=True,
                         check=True)
    return res.stdout.split("\n")[:2]


def test_top_level_kernels_in_the_checkout_root_is_empty_without_the_distribution(repo):
    # an empty module with no file (as a PEP 420 namespace package): transformers' probe, which imports the name
    # when no distribution metadata is found, and diffusers' (find_spec plus metadata) both report it absent
    assert _top_level_kernels_from_the_checkout_root(repo, "") == ["empty None [] True", "[]"]


def test_top_level_kernels_in_the_checkout_root_is_the_installed_distribution(repo, tmp_path):
    # a stand-in for Hugging Face's `kernels` (package and metadata), which transformers imports by name
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "__init__.py").write_text("WHO = 'distribution'\n")
    (tmp_path / "kernels-9.9.dist-info").mkdir()
    (tmp_path / "kernels-9.9.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: kernels\nVersion: 9.9\n")
    assert _top_level_kernels_from_the_checkout_root(repo, str(tmp_path)) == ["distribution 9.9", "[]"]


@pytest.mark.parametrize("top", ["recipes", "prompts"])
def test_data_folders_hold_no_code(repo, top):
    # their __init__.py only makes the folder a package importlib.resources can read (also from a zip)
    body = ast.parse((repo / top / "__init__.py").read_text()).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)


# Checks of the repository as a whole, named after what they check rather than after one module.
WHOLE_REPO_TESTS = {"test_packaging", "test_import_graph", "test_readme"}


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
