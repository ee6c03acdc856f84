"""The registry of study kinds (lowbit_video/ablate/kinds.py): the loader, `run_study` and the CLI
read it, so a kind registered there is loaded, run and shown with no other change."""

from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from lowbit_video import ablate
from lowbit_video.ablate.kinds import KINDS, StudyKind
from lowbit_video.ablate.studies import list_studies, study_from_dict
from lowbit_video.cli import app
from lowbit_video.errors import RecipeError


def test_every_shipped_study_has_a_registered_kind_and_each_kind_its_own_table():
    assert {s.kind for s in list_studies()} <= set(KINDS)
    sections = [k.section for k in KINDS.values()]
    assert len(set(sections)) == len(sections)
    assert all(name == k.name for name, k in KINDS.items())


def test_help_names_every_kind():
    res = CliRunner().invoke(app, ["ablate", "--help"], env={"COLUMNS": "400"})
    assert res.exit_code == 0
    for k in KINDS.values():
        assert f"{k.name} (" in res.stdout, k.name


@dataclass(frozen=True)
class ToyParams:
    size: int


def _toy_parameters(w, p, raw, capture):
    t = w.table(raw, p, {"size"})
    return ToyParams(size=w.scalar(t, "size", int, 3, p))


def _toy_run(study, opts, reporter=None):
    return {"study": study.name, "size": study.params.size, "files": []}


@pytest.fixture
def toy(monkeypatch):
    kind = StudyKind("toy", "a made-up kind", "toy", False, _toy_parameters, _toy_run, lambda r: f"size {r['size']}")
    monkeypatch.setitem(KINDS, "toy", kind)
    return kind


def test_a_registered_kind_is_loaded_and_run_through_its_entry(toy):
    s = study_from_dict({"kind": "toy", "toy": {"size": 5}}, source="t.toml", default_name="t")
    assert (s.kind, s.params) == ("toy", ToyParams(size=5))
    assert ablate.run_study(s, ablate.AblateOptions(device="cpu")) == {"study": "t", "size": 5, "files": []}
    # its table is its own: other kinds' tables and [capture] (it reads no captures) are refused
    for extra, key in (({"rowsum": {}}, "rowsum"), ({"capture": {}}, "capture")):
        with pytest.raises(RecipeError, match=rf"t\.toml: {key}: does not apply to kind 'toy'"):
            study_from_dict({"kind": "toy", **extra}, source="t.toml")
    with pytest.raises(RecipeError, match=r"toy: does not apply to kind 'table3'"):
        study_from_dict({"kind": "table3", "toy": {}}, source="t.toml")


def test_terminal_views_of_the_mechanism_studies():
    qmax = {"model": "m", "bins": ["<=7.15", "7.25"], "distribution": {"q": {"<=7.15": 12.5, "7.25": 87.5, "n": 8}}}
    assert KINDS["qmax-sweep"].render(qmax) == "m Q  <=7.15:  12.5%  7.25:  87.5%  (n = 8)"
    rowsum = {"average": {"mean_row_sum": 0.93, "zeroing": -0.05, "saturation": -0.02, "rounding_down": -0.04,
                          "rounding_up": 0.05}, "pnq": {"rowsum_dev_max": 2.5e-16}}
    assert KINDS["rowsum"].render(rowsum) == ("mean row sum 0.9300 (paper 0.9266); zeroing -0.0500, saturation -0.0200, "
                                              "rounding down -0.0400, rounding up +0.0500; PNQ max |row sum - 1| = 2.5e-16")


def test_the_table_studies_show_the_markdown_they_wrote(tmp_path):
    md = tmp_path / "t.md"
    md.write_text("| a |\n|---|\n")
    for name in ("table3", "rotate-table", "draft-pooling"):
        assert KINDS[name].render({"files": [str(md), str(tmp_path / "t.json")]}) == "| a |\n|---|\n"
