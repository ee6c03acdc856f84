"""`lowbit-video recipes`: a broken file among good ones hides none of them; no recipes is an error."""

import json

from typer.testing import CliRunner

from lowbit_video import recipes
from lowbit_video.cli import app

runner = CliRunner()

GOOD = 'name = "mine"\ndescription = "a user recipe"\n[attention]\nkind = "dense"\n'


def _folder(tmp_path):
    d = tmp_path / "user"
    d.mkdir()
    (d / "mine.toml").write_text(GOOD)
    (d / "broken.toml").write_text("name = \n")
    (d / "latin1.toml").write_bytes(b'name = "caf\xe9"\n')
    return d


def test_broken_files_are_reported_and_the_good_recipes_listed(tmp_path, monkeypatch):
    monkeypatch.setenv("LOWBIT_VIDEO_RECIPES", str(_folder(tmp_path)))
    res = runner.invoke(app, ["recipes"])
    assert res.exit_code == 2
    assert "mine" in res.stdout and "mxattention" in res.stdout and "fp16" in res.stdout  # user's and shipped
    errors = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(errors) == 2 and all(line.startswith("error: ") for line in errors)
    assert "broken.toml: not valid TOML" in errors[0] and "latin1.toml: not UTF-8" in errors[1]


def test_json_carries_the_broken_files(tmp_path, monkeypatch):
    d = _folder(tmp_path)
    monkeypatch.setenv("LOWBIT_VIDEO_RECIPES", str(d))
    res = runner.invoke(app, ["recipes", "--json"])
    got = json.loads(res.stdout)
    assert res.exit_code == 2
    names = {r["name"] for r in got["recipes"]}
    assert "mine" in names and "mxattention" in names and "broken" not in names
    assert [e.split(":")[0] for e in got["errors"]] == [str(d / "broken.toml"), str(d / "latin1.toml")]


def test_json_without_broken_files_has_an_empty_error_list(repo):
    res = runner.invoke(app, ["recipes", "--json"])
    got = json.loads(res.stdout)
    assert res.exit_code == 0 and got["errors"] == []
    assert sorted(r["name"] for r in got["recipes"]) == sorted(p.stem for p in (repo / "recipes").glob("*.toml"))


def test_no_recipes_at_all_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setattr(recipes, "recipe_dirs", lambda: [tmp_path / "empty"])
    res = runner.invoke(app, ["recipes"])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: no recipes found"), res.stderr
    assert res.stdout == ""
