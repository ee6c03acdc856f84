"""`--device`: auto (the default), cpu, cuda or cuda:N, resolved once when a command starts.

`auto` is CUDA when torch sees a GPU, else the CPU; the resolved name is what the run header prints
and what meta.json records, so a run says where it ran, not what was asked.
"""

from __future__ import annotations

from .errors import UserError

AUTO = "auto"
CHOICES = "auto, cpu, cuda or cuda:N"


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(name: str) -> str:
    """'auto' -> 'cuda' or 'cpu'; cpu, cuda and cuda:N as given; anything else a one-line UserError."""
    name = str(name)
    if name == AUTO:
        return "cuda" if _cuda_available() else "cpu"
    if name in ("cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit()):
        return name
    raise UserError(f"--device must be {CHOICES}, got {name!r}")


__all__ = ["AUTO", "CHOICES", "resolve_device"]
