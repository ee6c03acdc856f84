"""Errors a user can cause and fix. The CLI prints these as one line, without a traceback."""

from __future__ import annotations

import ast
import re


class UserError(Exception):
    """Bad input from the user: a recipe file, a name, a shape, a value. Message is one line."""


class RecipeError(UserError):
    """A recipe file or recipe name that cannot be used."""


class NonFiniteInputError(UserError, ValueError):
    """Attention inputs that contain NaN or Inf: quantization scales would be meaningless."""


class ShapeError(UserError, ValueError):
    """Tensor shapes that a recipe cannot run on (e.g. head_dim not a multiple of the MX block)."""


class DamagedRunError(ValueError):
    """A run's file that exists but cannot be read (truncated, corrupt): that run is reported and
    left out; the other runs of the command go on."""


class DiskFullError(UserError):
    """A write that failed for want of room: the disk (or quota) is full, or the file would pass the
    process's file-size limit (ulimit -f). Names the file; what was half-written is already removed.
    Not an OSError: code that skips an unreadable file must not take a full disk for one and go on."""

    def __init__(self, path, reason: str) -> None:
        super().__init__(f"cannot write {path}: {reason}")
        self.path, self.reason = path, reason


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) that a command caught to say where it stopped: the message is one line
    (e.g. how many runs are complete and that the same command resumes). The CLI prints it and exits 130."""


QUOTE_SHOWN = 60  # characters shown of a quoted prompt or word of more than twice as many
_LITERAL = r"'(?:[^'\\]|\\.)*'" + r'|"(?:[^"\\]|\\.)*"'  # a str repr, as f"{text!r}" writes it
_QUOTED = re.compile(_LITERAL)
_NAMED_WORD = re.compile(rf"(?:word|got) ({_LITERAL})")


def shorten_quotes(message: str, limit: int = QUOTE_SHOWN) -> str:
    """A message with every quoted text longer than 2 x `limit` characters (a pasted paragraph, a
    20 KB prompt) cut to an excerpt of `limit`: around the word the message names where the text holds it, else
    its start, with its full length said. The error stays one short line."""
    named = _NAMED_WORD.search(message)
    word = _unquote(named.group(1)) if named else None

    def cut(m: "re.Match[str]") -> str:
        text = _unquote(m.group(0))
        if text is None or len(text) <= 2 * limit:
            return m.group(0)
        at = text.lower().find(word.lower()) if word and len(word) <= limit and word != text else -1
        start = max(0, min(at - limit // 3, len(text) - limit)) if at >= 0 else 0
        piece = text[start:start + limit]
        return (f"{'…' if start else ''}{piece!r}{'…' if start + limit < len(text) else ''} "
                f"({len(text)} characters)")

    return _QUOTED.sub(cut, message)


def _unquote(literal: str) -> str | None:
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None
