"""`lowbit-video ablate --list`: the shipped studies; no studies at all is an error, not an empty table."""

import json

from typer.testing import CliRunner

from lowbit_video import recipes
from lowbit_video.cli import app

runner = CliRunner()


def test_list_shows_every_shipped_study(repo):
    res = runner.invoke(app, ["ablate", "--list", "--json"])
    assert res.exit_code == 0
    assert sorted(s["name"] for s in json.loads(res.stdout)["studies"]) == \
        sorted(p.stem for p in (repo / "recipes" / "ablations").glob("*.toml"))


def test_no_studies_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setattr(recipes, "recipe_dirs", lambda: [tmp_path])
    res = runner.invoke(app, ["ablate", "--list"])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: no studies found"), res.stderr
    assert res.stdout == ""
