"""TOML keys declared once, on the fields of frozen dataclasses.

Each key of a recipe (or study) table is a dataclass field made by `setting`: its default is the
field's default, its type is the default's type, and its valid values (choices, a range check, the
formats it applies to) and meaning sit beside it. The same declaration

* reads a TOML table (`read_table`): unknown keys, wrong types, values outside the choices or the
  range are one-line errors naming the file and the key path (`Where`); keys not written are left
  to the dataclass default;
* checks a value built in code (`check_fields`, for dataclasses that validate themselves);
* lists every key with its valid values (`schema_lines`: what `recipes schema` prints).

A field holding a nested table is made by `table`. Relations between keys (one key's value
restricting another's) are the loader's code, not declarations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator, Mapping

from .errors import RecipeError

_SETTING = "toml_schema.setting"
_TABLE = "toml_schema.table"


class SettingError(ValueError):
    """A declared field's value is invalid; `key` names the field (the loader adds file and table)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


@dataclass(frozen=True)
class Setting:
    """What one key takes; see `setting`."""

    doc: str
    valid: str = ""
    choices: tuple[Any, ...] | Mapping[str, tuple[Any, ...]] = ()
    check: Callable[[Any], bool] | None = None
    refusal: Callable[[Any], str] | None = None
    only: tuple[str, ...] = ()
    scope: str = ""
    width: int = 0

    def text(self, kind: type) -> str:
        """The valid values as `recipes schema` prints them."""
        if self.valid:
            text = self.valid
        elif isinstance(self.choices, Mapping):
            text = "; ".join(f"{', '.join(names)}: {' | '.join(map(str, ch))}" for names, ch in _grouped(self.choices))
        elif self.choices and kind is tuple:
            text = "a list drawn from " + ", ".join(map(str, self.choices))
        elif self.choices:
            text = " | ".join(map(str, self.choices))
        elif kind is bool:
            text = "true | false"
        else:
            text = ""
        return f"{self.scope or ', '.join(self.only)} only: {text}" if self.only else text

    def refuse(self, value: Any) -> str:
        return self.refusal(value) if self.refusal else f"must be {self.valid}, got {value!r}"


def setting(default: Any, doc: str, *, valid: str = "", choices: tuple | Mapping[str, tuple] = (),
            check: Callable[[Any], bool] | None = None, refusal: Callable[[Any], str] | None = None,
            only: tuple[str, ...] = (), scope: str = "", width: int = 0) -> Any:
    """A dataclass field that is a TOML key.

    default: the value when the key is not written; its type is the key's (a tuple: a TOML array of
        integers, or of `choices` when given; of arrays of `width` integers when width > 0).
    doc: what the key means. valid: its valid values in words (derived from `choices`, or from a
        bool default, when not given). check: the range, a predicate on the value read; refusal: the
        error when it fails (default: "must be <valid>, got <value>"). choices: the values allowed
        (a mapping: per operand name, see `read_table`). only / scope: the formats the key applies
        to, and how that reads when it is more than their names (the loader checks it).
    """
    s = Setting(doc=doc, valid=valid, choices=choices, check=check, refusal=refusal, only=only, scope=scope, width=width)
    if not s.text(type(default)) or (check is not None and not (valid or refusal)):
        raise TypeError(f"setting {doc!r}: state its valid values (valid=...), which errors and the schema print")
    return field(default=default, metadata={_SETTING: s})


def table(cls: type, doc: str, *, shown: str = "", optional: bool = False) -> Any:
    """A dataclass field holding the nested table `cls` (None when `optional` and not written);
    `shown`: its name in the schema when several fields share it (e.g. "<op>" for q, k, v, p)."""
    meta = {_TABLE: cls, "shown": shown, "doc": doc}
    if optional:
        return field(default=None, metadata=meta)
    return field(default_factory=cls, metadata=meta)


def settings(cls: type) -> Iterator[tuple[str, Setting, Any]]:
    """(key, its Setting, its default) for every key field of `cls`, in declaration order."""
    for f in fields(cls):
        if _SETTING in f.metadata:
            yield f.name, f.metadata[_SETTING], f.default


def tables(cls: type) -> Iterator[tuple[str, type, str]]:
    """(key, its dataclass, its name in the schema) for every nested-table field of `cls`."""
    for f in fields(cls):
        if _TABLE in f.metadata:
            yield f.name, f.metadata[_TABLE], f.metadata["shown"] or f.name


def _grouped(choices: Mapping[str, tuple]) -> list[tuple[list[str], tuple]]:
    """Consecutive names with the same choices share one entry: {q: a, k: a, v: b} -> [([q, k], a), ([v], b)]."""
    out: list[tuple[list[str], tuple]] = []
    for name, ch in choices.items():
        if out and out[-1][1] == ch:
            out[-1][0].append(name)
        else:
            out.append(([name], ch))
    return out


def schema_lines(cls: type, prefix: str = "", extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Key path -> valid values, for every key of `cls` and of its nested tables (each shown name once):
    the keys of the table itself first (then `extra`, keys read before validation), then the tables."""
    out = {prefix + key: s.text(type(default)) for key, s, default in settings(cls)}
    out.update(extra or {})
    for _, sub, shown in tables(cls):
        for key, text in schema_lines(sub, f"{prefix}{shown}.").items():
            out.setdefault(key, text)
    return out


def _choices_for(s: Setting, operand: str | None) -> tuple:
    return s.choices[operand] if isinstance(s.choices, Mapping) else s.choices


def _int_row(value: Any, width: int) -> bool:
    return isinstance(value, list) and len(value) == width and all(isinstance(x, int) and not isinstance(x, bool) for x in value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Where:
    """Validation helper that knows which file it reads, so errors name the file and key."""

    def __init__(self, source: str):
        self.source = source

    def error(self, key: str, message: str) -> RecipeError:
        return RecipeError(f"{self.source}: {key}: {message}")

    def table(self, value: Any, prefix: str, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(prefix or "<top>", "expected a table")
        for key in value:
            if key not in allowed:
                raise self.error(f"{prefix}{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return value

    def scalar(self, table: Mapping[str, Any], key: str, kind: type, default: Any, prefix: str = "") -> Any:
        if key not in table:
            return default
        value = table[key]
        ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise self.error(f"{prefix}{key}", f"expected {kind.__name__}, got {value!r}")
        return value

    def choice(self, table: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str, prefix: str = "") -> str:
        value = self.scalar(table, key, str, default, prefix)
        if value not in choices:
            raise self.error(f"{prefix}{key}", f"{value!r} is not one of {', '.join(choices)}")
        return value

    def int_list(self, table: Mapping[str, Any], key: str, prefix: str) -> tuple[int, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.error(f"{prefix}{key}", f"expected a list of integers, got {value!r}")
        return tuple(value)


def _read_value(where: Where, t: Mapping[str, Any], key: str, s: Setting, default: Any, prefix: str,
                operand: str | None) -> Any:
    kind, choices = type(default), _choices_for(s, operand)
    if kind is tuple and choices:
        value = t[key]
        if not isinstance(value, list) or not all(isinstance(v, str) and v in choices for v in value):
            raise where.error(prefix + key, f"expected a list drawn from {', '.join(map(repr, choices))}, got {value!r}")
        return tuple(value)
    if kind is tuple and s.width:
        value = t[key]
        if not isinstance(value, list) or not all(_int_row(v, s.width) for v in value):
            raise where.error(prefix + key, f"expected a list of [{', '.join(['integer'] * s.width)}] lists, got {value!r}")
        return tuple(tuple(v) for v in value)
    if kind is tuple:
        return where.int_list(t, key, prefix)
    value = where.scalar(t, key, kind, default, prefix)
    if choices and value not in choices:
        raise where.error(prefix + key, f"{value!r} is not one of {', '.join(map(str, choices))}")
    return value


def read_table(where: Where, raw: Any, prefix: str, cls: type, *, extra: set[str] = frozenset(),
               operand: str | None = None) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """Check table `raw` (at key path `prefix`) against the keys of `cls`: (the table, {key: value}
    for each setting written, type-checked, within its choices and range). Keys not written are
    absent (the dataclass default applies); nested tables are left to the caller, raw in the table.
    `extra`: further keys allowed here; `operand`: which entry of per-operand choices applies."""
    allowed = {key for key, _, _ in settings(cls)} | {key for key, _, _ in tables(cls)} | set(extra)
    t = where.table(raw, prefix, allowed)
    values: dict[str, Any] = {}
    for key, s, default in settings(cls):
        if key not in t:
            continue
        value = _read_value(where, t, key, s, default, prefix, operand)
        if s.check is not None and not s.check(value):
            raise where.error(prefix + key, s.refuse(t[key] if isinstance(t[key], list) else value))
        values[key] = value
    return t, values


def check_fields(obj: Any, error: type[SettingError] = SettingError) -> None:
    """Raise `error` (key, message) unless every key field of dataclass `obj` holds a value of its
    type, within its choices and range: the declarations applied to a value built in code."""
    for key, s, default in settings(type(obj)):
        value, kind = getattr(obj, key), type(default)
        if kind is float:
            ok = _is_number(value) and math.isfinite(value)
        elif kind is int:
            ok = type(value) is int
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise error(key, f"expected {'a finite number' if kind is float else kind.__name__}, got {value!r}")
        choices = _choices_for(s, None) if not isinstance(s.choices, Mapping) else ()
        if choices and kind is not tuple and value not in choices:
            raise error(key, f"{value!r} is not one of {', '.join(map(str, choices))}")
        if s.check is not None and not s.check(value):
            raise error(key, s.refuse(value))


__all__ = ["Setting", "SettingError", "Where", "check_fields", "read_table", "schema_lines", "setting",
           "settings", "table", "tables"]
