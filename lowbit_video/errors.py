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
