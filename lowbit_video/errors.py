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
