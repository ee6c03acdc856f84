"""Recipe files read as bytes from any Traversable: files that are not UTF-8 text, and includes
between files inside a zip (a wheel on sys.path has no file system paths)."""

import zipfile

import pytest
from typer.testing import CliRunner

from lowbit_video import recipes
from lowbit_video.cli import app
from lowbit_video.errors import RecipeError
from lowbit_video.recipes import load_recipe, read_with_includes

runner = CliRunner()

# (file contents, the first byte that is not UTF-8, its offset), worked out by hand
NOT_UTF8 = {
    "latin-1": (b'name = "caf\xe9"\n', 0xE9, 11),  # é in Latin-1; 11 ASCII bytes before it
    "binary": (b"\x00\xff\x10\x20", 0xFF, 1),  # 0x00 is valid UTF-8, 0xff never is
    # an ELF header: e_ident (16 bytes), e_type, e_machine, e_version (8 bytes), then the entry point,
    # whose low byte 0xb0 is a bare continuation byte
    "elf": (b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\x02\x00\x3e\x00\x01\x00\x00\x00" + b"\xb0\x10\x40\x00", 0xB0, 24),
}


@pytest.mark.parametrize("kind", sorted(NOT_UTF8))
def test_a_file_that_is_not_utf8_is_a_recipe_error_naming_file_and_byte(tmp_path, kind):
    raw, byte, offset = NOT_UTF8[kind]
    path = tmp_path / f"{kind}.toml"
    path.write_bytes(raw)
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert str(path) in str(e.value) and f"byte 0x{byte:02x} at offset {offset}" in str(e.value)


@pytest.mark.parametrize("command", [["recipes", "validate"], ["generate", "--steps", "1", "--recipe"]])
def test_not_utf8_through_the_cli_is_one_line_and_exit_2(tmp_path, command):
    path = tmp_path / "bin.toml"
    path.write_bytes(NOT_UTF8["elf"][0])
    res = runner.invoke(app, [*command, str(path), *(["--out", str(tmp_path / "o")] if command[0] == "generate" else [])])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and str(path) in lines[0] and "offset 24" in lines[0]
    assert res.exception is None or isinstance(res.exception, SystemExit)


def _zip(tmp_path, files: dict[str, str]) -> zipfile.Path:
    path = tmp_path / "shipped.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return zipfile.Path(path, "r/")


ZIPPED = {
    # a.toml includes base/b.toml (relative to a.toml's folder), which includes c.toml beside itself
    "r/a.toml": 'include = "base/b.toml"\ndescription = "a"\n[attention.q]\nrule = "ocp"\n',
    "r/base/b.toml": 'include = "c.toml"\ndescription = "b"\n[attention]\nplacement = "direct"\n',
    "r/base/c.toml": ('description = "c"\n[attention]\nkind = "quantized"\nplacement = "pnq"\n'
                      '[attention.q]\nformat = "mxfp4"\nrule = "uos"\n'),
}


def test_includes_resolve_inside_a_zip(tmp_path):
    root = _zip(tmp_path, ZIPPED)
    merged = read_with_includes(root.joinpath("a.toml"))
    # each file over the one it includes, key by key
    assert merged == {"description": "a", "attention": {"kind": "quantized", "placement": "direct",
                                                          "q": {"format": "mxfp4", "rule": "ocp"}}}


def test_recipe_names_resolve_from_a_zip_folder(tmp_path, monkeypatch):
    root = _zip(tmp_path, ZIPPED)
    monkeypatch.setattr(recipes, "recipe_dirs", lambda: [root])
    assert set(recipes.available_recipes()) == {"a"}  # base/ holds include files, not recipes
    r = load_recipe("a")
    assert r.name == "a" and r.attention.placement == "direct" and r.attention.q.rule == "ocp"
    assert r.source.startswith(str(tmp_path / "shipped.zip"))


def test_an_include_cycle_inside_a_zip_is_one_error(tmp_path):
    root = _zip(tmp_path, {"r/a.toml": 'include = "b.toml"\n', "r/b.toml": 'include = "a.toml"\n'})
    with pytest.raises(RecipeError, match="include cycle"):
        read_with_includes(root.joinpath("a.toml"))


def test_a_missing_include_inside_a_zip_names_where_it_looked(tmp_path, monkeypatch):
    root = _zip(tmp_path, {"r/a.toml": 'include = "base/none.toml"\n'})
    monkeypatch.setattr(recipes, "recipe_dirs", lambda: [root])
    with pytest.raises(RecipeError, match="no file 'base/none.toml'"):
        load_recipe("a")
