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


def test_a_broken_study_is_reported_and_the_good_ones_listed(tmp_path, monkeypatch):
    (tmp_path / "ablations").mkdir()
    (tmp_path / "ablations" / "broken.toml").write_bytes(b'kind = "rowsum"\nname = "caf\xe9"\n')
    monkeypatch.setenv("LOWBIT_VIDEO_RECIPES", str(tmp_path))
    res = runner.invoke(app, ["ablate", "--list", "--json"])
    got = json.loads(res.stdout)
    assert res.exit_code == 2 and "table3" in {s["name"] for s in got["studies"]}
    # 'kind = "rowsum"\n' (16 bytes) and 'name = "caf' (11) come before the Latin-1 é
    assert len(got["errors"]) == 1 and str(tmp_path / "ablations" / "broken.toml") in got["errors"][0]
    assert "byte 0xe9 at offset 27" in got["errors"][0]
    assert [line for line in res.stderr.splitlines() if line.strip()] == ["error: " + got["errors"][0]]
