"""The closed prompt grammar of tiny-shapes.

    prompt  := object ("and" object)? "on a" BACKGROUND "background"
    object  := ("a" | "an") COLOR SHAPE MOTION
    MOTION  := "moving left" | "moving right" | "moving up" | "moving down" | "static" | "growing"

e.g. "a red circle moving left on a black background". An object may not have the background's
colour (a white shape on a white background is invisible), and a prompt names at most two objects.
Parsing is case-insensitive, collapses whitespace, ignores one trailing period and takes "a" or "an"
before an object; `ClipSpec.prompt` is the canonical text (lower case, single spaces, "an" before a
vowel: "an orange square static on a white background").
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Object palette: RGB in [0, 1]. Primaries, secondaries, white and orange. The closest pair
# (orange against red and against yellow) is 0.5 apart in RGB; every colour is at least 0.71 from
# every background it may appear on (orange on gray), so foreground/background separation and
# nearest-colour classification both have wide margins.
COLORS: dict[str, tuple[float, float, float]] = {
    "red": (1.0, 0.0, 0.0),
    "green": (0.0, 1.0, 0.0),
    "blue": (0.0, 0.0, 1.0),
    "yellow": (1.0, 1.0, 0.0),
    "cyan": (0.0, 1.0, 1.0),
    "magenta": (1.0, 0.0, 1.0),
    "white": (1.0, 1.0, 1.0),
    "orange": (1.0, 0.5, 0.0),
}
BACKGROUNDS: dict[str, tuple[float, float, float]] = {
    "black": (0.0, 0.0, 0.0),
    "gray": (0.5, 0.5, 0.5),
    "white": (1.0, 1.0, 1.0),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
DIRECTIONS: tuple[str, ...] = ("left", "right", "up", "down")
MOTIONS: tuple[str, ...] = tuple(f"moving {d}" for d in DIRECTIONS) + ("static", "growing")
MAX_OBJECTS = 2

_GRAMMAR = "a <color> <shape> <motion> [and a <color> <shape> <motion>] on a <background> background"


@dataclass(frozen=True)
class ObjectSpec:
    """One object of a clip: colour name, shape name, motion phrase (e.g. "moving left")."""

    color: str
    shape: str
    motion: str

    def __post_init__(self) -> None:
        for value, allowed, what in ((self.color, COLORS, "colour"), (self.shape, SHAPES, "shape"),
                                     (self.motion, MOTIONS, "motion")):
            if value not in allowed:
                raise ValueError(f"unknown {what} {value!r}; expected one of: {', '.join(allowed)}")

    @property
    def phrase(self) -> str:
        article = "an" if self.color[0] in "aeiou" else "a"
        return f"{article} {self.color} {self.shape} {self.motion}"

    @property
    def rgb(self) -> tuple[float, float, float]:
        return COLORS[self.color]


@dataclass(frozen=True)
class ClipSpec:
    """What a clip shows: one or two objects on a plain background."""

    objects: tuple[ObjectSpec, ...]
    background: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "objects", tuple(self.objects))
        if not 1 <= len(self.objects) <= MAX_OBJECTS:
            raise ValueError(f"a prompt names 1 to {MAX_OBJECTS} objects, got {len(self.objects)}")
        if self.background not in BACKGROUNDS:
            raise ValueError(f"unknown background {self.background!r}; expected one of: {', '.join(BACKGROUNDS)}")
        for obj in self.objects:
            if not isinstance(obj, ObjectSpec):
                raise TypeError(f"objects must be ObjectSpec, got {type(obj).__name__}")
            if obj.color == self.background:
                raise ValueError(f"a {obj.color} {obj.shape} on a {self.background} background is invisible: "
                                 "object colour must differ from the background")

    @property
    def prompt(self) -> str:
        """Canonical prompt text; `parse_prompt(spec.prompt) == spec`."""
        return " and ".join(o.phrase for o in self.objects) + f" on a {self.background} background"

    @property
    def single_object(self) -> bool:
        return len(self.objects) == 1

    @property
    def background_rgb(self) -> tuple[float, float, float]:
        return BACKGROUNDS[self.background]


@functools.lru_cache(maxsize=1)
def _vocabulary() -> tuple[str, ...]:
    words = {"a", "an", "and", "on", "background"} | set(COLORS) | set(BACKGROUNDS) | set(SHAPES)
    for m in MOTIONS:
        words.update(m.split())
    return tuple(sorted(words))


def vocabulary() -> list[str]:
    """Every word the grammar uses, sorted (the text encoder's word list)."""
    return list(_vocabulary())


def vocabulary_by_role() -> dict[str, list[str]]:
    """The words a prompt may use, by the slot they fill (what `lowbit-video models --json` lists)."""
    return {"grammar": [_GRAMMAR], "colors": list(COLORS), "shapes": list(SHAPES), "motions": list(MOTIONS),
            "backgrounds": list(BACKGROUNDS)}


def _known_words() -> str:
    return (f"colours {', '.join(COLORS)}; shapes {', '.join(SHAPES)}; motions {', '.join(MOTIONS)}; "
            f"backgrounds {', '.join(BACKGROUNDS)}")


def parse_prompt(text: str) -> ClipSpec:
    """Parse a prompt of the grammar into a `ClipSpec`.

    Raises ValueError with a one-line message: an unknown word is named; a known word in the wrong
    place says what was expected; an object coloured like the background is rejected.
    """
    if not isinstance(text, str):
        raise TypeError(f"prompt must be a str, got {type(text).__name__}")
    words = text.strip().lower().split()
    if words and words[-1].endswith("."):
        words[-1] = words[-1][:-1]
        if not words[-1]:
            words.pop()
    if not words:
        raise ValueError(f"empty prompt; expected {_GRAMMAR!r}")
    known = set(_vocabulary())
    for w in words:
        if w not in known:
            raise ValueError(f"unknown word {w!r} in prompt {text!r}; the grammar is {_GRAMMAR!r} with "
                             f"{_known_words()}")

    pos = 0

    def take(allowed: Iterable[str], what: str) -> str:
        nonlocal pos
        allowed = tuple(allowed)
        if pos >= len(words):
            raise ValueError(f"prompt {text!r} ends early: expected {what}; the grammar is {_GRAMMAR!r}")
        w = words[pos]
        if w not in allowed:
            raise ValueError(f"expected {what} at word {pos + 1} of prompt {text!r}, got {w!r}")
        pos += 1
        return w

    objects = []
    while True:
        take(["a", "an"], "'a' or 'an'")
        color = take(COLORS, "a colour (" + ", ".join(COLORS) + ")")
        shape = take(SHAPES, "a shape (" + ", ".join(SHAPES) + ")")
        head = take(["moving", "static", "growing"], "a motion (moving <direction>, static, growing)")
        motion = f"moving {take(DIRECTIONS, 'a direction (' + ', '.join(DIRECTIONS) + ')')}" if head == "moving" else head
        objects.append(ObjectSpec(color, shape, motion))
        if take(["and", "on"], "'and' or 'on'") == "on":
            break
    take(["a"], "'a'")
    background = take(BACKGROUNDS, "a background (" + ", ".join(BACKGROUNDS) + ")")
    take(["background"], "'background'")
    if pos != len(words):
        raise ValueError(f"unexpected word {words[pos]!r} after the end of prompt {text!r}")
    return ClipSpec(tuple(objects), background)


def _objects() -> list[ObjectSpec]:
    return [ObjectSpec(c, s, m) for c in COLORS for s in SHAPES for m in MOTIONS]


@functools.lru_cache(maxsize=2)
def _all_specs(single_object: bool) -> tuple[ClipSpec, ...]:
    specs = [ClipSpec((o,), bg) for bg in BACKGROUNDS for o in _objects() if o.color != bg]
    if not single_object:
        specs += [ClipSpec((a, b), bg) for bg in BACKGROUNDS
                  for a, b in itertools.product(_objects(), repeat=2)
                  if a.color != b.color and bg not in (a.color, b.color)]
    return tuple(specs)


def all_prompts(single_object: bool = True) -> list[str]:
    """The full enumerated prompt set (414 single-object prompts).

    With single_object=False, two-object prompts follow: every ordered pair of objects of different
    colours, neither coloured like the background.
    """
    return [s.prompt for s in _all_specs(single_object)]


def sample_prompts(n: int, seed: int, *, single_object: bool = True) -> list[str]:
    """`n` prompts drawn uniformly without replacement (cycling through fresh permutations when `n`
    exceeds the set), deterministic in `seed`."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    pool = all_prompts(single_object)
    rng = np.random.default_rng(seed)
    out: list[str] = []
    while len(out) < n:
        out += [pool[i] for i in rng.permutation(len(pool))[: n - len(out)]]
    return out


def balanced_prompts(n: int = 24, seed: int = 0) -> list[str]:
    """`n` distinct single-object prompts with a balanced design: each colour, shape, motion and
    background appears floor(n / k) or ceil(n / k) times (so every value at least once when n >= 8),
    attributes paired by seeded shuffles. prompts/shapes.txt is `balanced_prompts(24, seed=0)`.
    Sorted by colour, shape, motion, background (grammar order)."""
    if not 1 <= n <= len(all_prompts()):
        raise ValueError(f"n must be in 1..{len(all_prompts())}, got {n}")
    rng = np.random.default_rng(seed)

    def column(values: Iterable[str]) -> list[str]:
        values = list(values)
        return [values[i % len(values)] for i in range(n)]

    for _ in range(10_000):
        cols = [column(COLORS), column(SHAPES), column(MOTIONS), column(BACKGROUNDS)]
        for col in cols[1:]:
            rng.shuffle(col)
        rows = list(zip(*cols))
        if any(c == bg for c, _, _, bg in rows) or len(set(rows)) != n:
            continue
        order = (list(COLORS), list(SHAPES), list(MOTIONS), list(BACKGROUNDS))
        rows.sort(key=lambda r: tuple(o.index(v) for o, v in zip(order, r)))
        return [ClipSpec((ObjectSpec(c, s, m),), bg).prompt for c, s, m, bg in rows]
    raise RuntimeError("could not draw a balanced prompt set")  # pragma: no cover


def read_prompts(path: str | Path) -> list[str]:
    """Prompts of a prompt file: one per line; blank lines and lines starting with '#' (comments,
    e.g. a header saying how the file was made) are skipped. Each prompt is validated with
    `parse_prompt` and returned in canonical form; a bad line raises ValueError naming file and line."""
    path = Path(path)
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            out.append(parse_prompt(line).prompt)
        except ValueError as e:
            raise ValueError(f"{path}:{lineno}: {e}") from None
    return out
