"""Errors a user can cause and fix. The CLI prints these as one line, without a traceback."""

from __future__ import annotations


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
