"""lowbit_video/checkout_folders.py: Python started in a checkout's root with no install mapping that checkout's
kernels/, recipes/ and prompts/ (a regular install elsewhere, which the current directory shadows, or PYTHONPATH
naming the checkout) still finds them as lowbit_video.kernels and lowbit_video.data.recipes / .prompts; in an
installed layout the finder is not added."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lowbit_video.checkout_folders import CheckoutFolders, install


def _run_in_checkout_root(repo, tmp_path, *args):
    """`python ARGS` in the checkout's root (the root first on sys.path) with the editable install's finder taken
    out, as tests/wheel_check.sh does: only the checkout's own folders can answer for the package."""
    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(
        "import sys\nsys.meta_path[:] = [f for f in sys.meta_path "
        "if not getattr(f, '__module__', '').startswith('__editable__')]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "LOWBIT_VIDEO_RECIPES")}
    env["PYTHONPATH"] = str(boot)
    return subprocess.run([sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=120)


def test_kernels_and_data_folders_import_from_the_checkout_root_without_an_install(repo, tmp_path):
    code = ("import json, lowbit_video, lowbit_video.kernels.dispatch as d, lowbit_video.data as data\n"
            "print(json.dumps([lowbit_video.__file__, d.__file__,"
            " sorted(p.name for p in data.recipe_folder().iterdir()),"
            " sorted(p.name for p in data.prompt_folder().iterdir())]))")
    res = _run_in_checkout_root(repo, tmp_path, "-c", code)
    assert res.returncode == 0, res.stderr
    package, dispatch, recipes, prompts = json.loads(res.stdout)
    assert os.path.realpath(package) == os.path.realpath(repo / "lowbit_video" / "__init__.py")
    assert os.path.realpath(dispatch) == os.path.realpath(repo / "kernels" / "dispatch.py")
    assert "sage2-int8.toml" in recipes and "ablations" in recipes
    assert "smoke.txt" in prompts


def test_the_cli_runs_as_a_module_from_the_checkout_root_without_an_install(repo, tmp_path):
    res = _run_in_checkout_root(repo, tmp_path, "-m", "lowbit_video", "recipes", "--json")
    assert res.returncode == 0, res.stderr
    assert "sage2-int8" in res.stdout and "mxattention" in res.stdout


def test_the_finder_maps_the_names_of_the_package_dir_table_only(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "lowbit_video" = "lowbit_video", "lowbit_video.extra" = "extra_folder" }\n')
    (tmp_path / "extra_folder").mkdir()
    (tmp_path / "extra_folder" / "__init__.py").write_text("")
    finder = CheckoutFolders(str(tmp_path))
    spec = finder.find_spec("lowbit_video.extra")
    assert spec.origin == str(tmp_path / "extra_folder" / "__init__.py")
    assert spec.submodule_search_locations == [str(tmp_path / "extra_folder")]
    assert finder.find_spec("lowbit_video") is None  # the package itself is the import system's to find
    assert finder.find_spec("lowbit_video.other") is None
    assert finder.find_spec("extra") is None


def test_no_finder_where_the_package_holds_its_folders_or_no_checkout_surrounds_it(tmp_path, monkeypatch):
    # without the finder this process's own import of the package added (the checkout these tests run from)
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, CheckoutFolders)])
    before = list(sys.meta_path)
    installed = tmp_path / "site" / "lowbit_video"  # a wheel's layout: kernels/ inside the package
    (installed / "kernels").mkdir(parents=True)
    (tmp_path / "site" / "pyproject.toml").write_text("")
    install(str(installed))
    bare = tmp_path / "bare" / "lowbit_video"  # no pyproject.toml beside it
    bare.mkdir(parents=True)
    install(str(bare))
    assert sys.meta_path == before
    checkout = tmp_path / "checkout" / "lowbit_video"
    checkout.mkdir(parents=True)
    (tmp_path / "checkout" / "pyproject.toml").write_text("")
    install(str(checkout))
    install(str(checkout))
    added = [f for f in sys.meta_path if f not in before]
    assert len(added) == 1 and isinstance(added[0], CheckoutFolders) and sys.meta_path[-1] is added[0]
