"""The shipped files (lowbit_video.data): the repository's recipes/ and prompts/, found through
importlib.resources (tests/wheel_check.sh checks the same from a wheel and from a zip)."""

from lowbit_video import data
from lowbit_video.recipes import available_recipes


def test_the_shipped_recipe_folder_holds_the_repository_recipes(repo):
    names = sorted(f.name for f in data.recipe_folder().iterdir() if f.name.endswith(".toml"))
    assert names == sorted(p.name for p in (repo / "recipes").glob("*.toml"))
    assert data.recipe_folder().joinpath("base").joinpath("mxattention.toml").read_bytes() == \
        (repo / "recipes" / "base" / "mxattention.toml").read_bytes()


def test_recipe_names_resolve_without_the_environment_variable(repo, monkeypatch):
    monkeypatch.delenv("LOWBIT_VIDEO_RECIPES", raising=False)
    assert set(available_recipes()) == {p.stem for p in (repo / "recipes").glob("*.toml")}


def test_the_environment_variable_adds_folders_in_front(tmp_path, monkeypatch):
    (tmp_path / "fp16.toml").write_text('description = "mine"\n')
    monkeypatch.setenv("LOWBIT_VIDEO_RECIPES", str(tmp_path))
    found = available_recipes()
    assert str(found["fp16"]) == str(tmp_path / "fp16.toml") and "mxattention" in found


def test_prompt_sets_are_the_repository_prompt_files(repo):
    sets = data.prompt_sets()
    assert sorted(sets) == sorted(p.stem for p in (repo / "prompts").glob("*.txt"))
    for name, file in sets.items():
        assert file.read_bytes() == (repo / "prompts" / f"{name}.txt").read_bytes()


def test_a_prompt_set_by_name_or_by_its_repository_path():
    smoke = data.prompt_sets()["smoke"]
    assert data.prompt_set("smoke") == smoke and data.prompt_set("prompts/smoke.txt") == smoke
    for text in ("nope", "prompts/nope.txt", "other/smoke.txt", "prompts/../smoke.txt", "smoke.txt", "", "prompts/.txt"):
        assert data.prompt_set(text) is None, text
