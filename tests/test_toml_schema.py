"""Keys declared on dataclass fields (lowbit_video/toml_schema.py): reading, checking and listing a
table from the declarations alone, on a made-up table."""

from dataclasses import dataclass

import pytest

from lowbit_video.errors import RecipeError
from lowbit_video.toml_schema import SettingError, Where, check_fields, read_table, schema_lines, setting, table


@dataclass(frozen=True)
class Inner:
    mode: str = setting("a", "mode", choices={"x": ("a", "b"), "y": ("a", "b"), "z": ("a", "c")})
    level: int = setting(2, "level", valid="an integer >= 1", check=lambda n: n >= 1)


@dataclass(frozen=True)
class Outer:
    size: float = setting(1.5, "size", valid="a positive number", check=lambda s: s > 0)
    flag: bool = setting(False, "flag")
    tags: tuple[str, ...] = setting(("p",), "tags", choices=("p", "q"))
    steps: tuple[int, ...] = setting((), "steps", valid="a list of integers")
    cells: tuple[tuple[int, int], ...] = setting((), "cells", valid="a list of [i, j] pairs", width=2)
    tune: str = setting("lo", "tune", choices=("lo", "hi"), only=("x",))
    x: Inner = table(Inner, "x", shown="<n>")
    y: Inner = table(Inner, "y", shown="<n>")


W = Where("f.toml")


def _error(raw, **kw) -> str:
    with pytest.raises(RecipeError) as e:
        read_table(W, raw, "t.", Outer, **kw)
    return str(e.value)


def test_keys_not_written_are_left_to_the_dataclass_default():
    t, values = read_table(W, {"flag": True, "x": {}}, "t.", Outer)
    assert values == {"flag": True} and t["x"] == {}  # nested tables are returned raw
    assert Outer(**values) == Outer(flag=True)


def test_values_are_read_with_their_declared_types():
    _, values = read_table(W, {"size": 3, "tags": ["q", "p"], "steps": [0, -1], "cells": [[0, 1], [2, -1]]}, "t.", Outer)
    assert values == {"size": 3.0, "tags": ("q", "p"), "steps": (0, -1), "cells": ((0, 1), (2, -1))}
    assert type(values["size"]) is float


@pytest.mark.parametrize("raw, message", [
    ({"colour": 1}, "f.toml: t.colour: unknown key (allowed: cells, flag, size, steps, tags, tune, x, y)"),
    ({"size": "3"}, "f.toml: t.size: expected float, got '3'"),
    ({"size": True}, "f.toml: t.size: expected float, got True"),
    ({"size": -1}, "f.toml: t.size: must be a positive number, got -1.0"),
    ({"flag": 1}, "f.toml: t.flag: expected bool, got 1"),
    ({"tags": ["r"]}, "f.toml: t.tags: expected a list drawn from 'p', 'q', got ['r']"),
    ({"steps": [True]}, "f.toml: t.steps: expected a list of integers, got [True]"),
    ({"cells": [[0, 1, 2]]}, "f.toml: t.cells: expected a list of [integer, integer] lists, got [[0, 1, 2]]"),
    ({"cells": [0, 1]}, "f.toml: t.cells: expected a list of [integer, integer] lists, got [0, 1]"),
    ({"tune": "mid"}, "f.toml: t.tune: 'mid' is not one of lo, hi"),
])
def test_each_bad_value_is_one_error_naming_file_key_and_valid_values(raw, message):
    assert _error(raw) == message


def test_choices_per_name_and_ranges_in_a_nested_table():
    _, values = read_table(W, {"mode": "c"}, "t.z.", Inner, operand="z")
    assert values == {"mode": "c"}
    with pytest.raises(RecipeError, match=r"t\.x\.mode: 'c' is not one of a, b"):
        read_table(W, {"mode": "c"}, "t.x.", Inner, operand="x")
    with pytest.raises(RecipeError, match=r"t\.x\.level: must be an integer >= 1, got 0"):
        read_table(W, {"level": 0}, "t.x.", Inner, operand="x")


def test_schema_lists_each_key_once_with_its_valid_values():
    assert schema_lines(Outer, "t.", extra={"include": "a path"}) == {
        "t.size": "a positive number",
        "t.flag": "true | false",
        "t.tags": "a list drawn from p, q",
        "t.steps": "a list of integers",
        "t.cells": "a list of [i, j] pairs",
        "t.tune": "x only: lo | hi",
        "include": "a path",
        "t.<n>.mode": "x, y: a | b; z: a | c",  # names sharing choices are grouped
        "t.<n>.level": "an integer >= 1",
    }


def test_check_fields_applies_the_declarations_to_a_value_built_in_code():
    check_fields(Outer())
    for bad, message in (({"size": float("nan")}, "size: expected a finite number, got nan"),
                         ({"size": 0.0}, "size: must be a positive number, got 0.0"),
                         ({"tune": "mid"}, "tune: 'mid' is not one of lo, hi")):
        with pytest.raises(SettingError) as e:
            check_fields(Outer(**bad))
        assert str(e.value) == message
    with pytest.raises(SettingError, match="level: expected int, got 1.0"):
        check_fields(Inner(level=1.0))
