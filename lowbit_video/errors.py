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


class AttentionInputError(UserError, TypeError):
    """Attention inputs of the wrong kind: not torch tensors, not floating point, of different dtypes or on
    different devices."""


class InferenceOnlyError(UserError, RuntimeError):
    """A call autograd would record through attention that has no gradients (see `inference_only`)."""


def records_autograd(*tensors) -> bool:
    """Whether autograd would record a call on these tensors (grad mode on, one of them requiring grad): two flag
    reads, no host synchronisation."""
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def refuse_autograd(subject: str, *tensors) -> None:
    """Raise `inference_only(subject)` where autograd would record a call on `tensors`."""
    if records_autograd(*tensors):
        raise inference_only(subject)


def inference_only(subject: str) -> InferenceOnlyError:
    """The error for `subject` (e.g. "recipe 'mxattention'") called while autograd records: quantization has no
    useful gradient (rounding is flat almost everywhere) and the kernels and the CPU path have no backward, so
    the only honest answer is to refuse rather than return zero or wrong gradients."""
    return InferenceOnlyError(
        f"{subject} is inference-only (it has no gradients): call it under torch.no_grad() or "
        "torch.inference_mode(); only the fp16 recipe on attend's default backend (torch SDPA) supports autograd")


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
