"""LPIPS (v0.1, AlexNet) from verified local weights only.

Why not plain `lpips.LPIPS(net='alex')`: it asks torchvision for the AlexNet trunk, which downloads it
when absent (offline: URLError) and, when present, trusts any file of that name. Instead the model is
built with `pnet_rand=True` (no download attempted; a random trunk), and the trunk is then replaced
by the `features.*` tensors of `<root>/torch/hub/checkpoints/alexnet-owt-7be5be79.pth`, loaded with
`torch.load(weights_only=True)` after its sha256 has been checked against the manifest (prefix
7be5be79). The linear heads ship inside the lpips wheel (`lpips/weights/v0.1/alex.pth`); lpips itself
loads them with strict=False, so they are re-loaded here and every head key is required. A missing
or mismatched file makes the metric unavailable -- never a random or substitute trunk.

Frames (uint8 or [0, 1]) are scaled to [-1, 1], scored per frame pair, and averaged over frames.
AlexNet's strides need frames of at least MIN_SIDE pixels per side.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from .weights import WeightFile, missing_for

METRIC = "lpips"
TRUNK_KEY = "lpips-alexnet"
MIN_SIDE = 31  # conv1 (11, stride 4) and two 3x3 stride-2 max-pools must leave >= 1 pixel
# lpips.pretrained_networks.alexnet: slice k holds features[lo:hi], modules keep their feature index.
SLICES = {1: range(0, 2), 2: range(2, 5), 3: range(5, 8), 4: range(8, 10), 5: range(10, 12)}

_CACHE: dict[tuple, object] = {}


def unavailable(root: str | os.PathLike, manifest: Sequence[WeightFile] | None = None) -> str | None:
    """Why LPIPS cannot be computed under `root` (missing package or weights), or None."""
    import importlib.util

    for mod in ("lpips", "torchvision"):  # found, not imported: importing torch costs seconds
        if importlib.util.find_spec(mod) is None:
            return f"python package {mod} is not installed"
    return missing_for(METRIC, root, manifest)


def _trunk_path(root: Path, manifest: Sequence[WeightFile]) -> Path:
    from . import weights

    (entry,) = [w for w in (weights.MANIFEST if manifest is None else manifest) if w.key == TRUNK_KEY]
    return root / entry.relpath


def _trunk_state(path: Path) -> dict:
    """The trunk's state dict in lpips' slice naming, from a torchvision AlexNet state dict."""
    import torch

    sd = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(sd, dict):
        raise ValueError(f"{path.name} is not a state dict")
    out = {}
    for k, idx in SLICES.items():
        for i in idx:
            for p in ("weight", "bias"):
                name = f"features.{i}.{p}"
                if name in sd:
                    out[f"slice{k}.{i}.{p}"] = sd[name]
    return out


def load_model(root: str | os.PathLike, manifest: Sequence[WeightFile] | None = None):
    """The LPIPS model with the verified trunk; raises RuntimeError with a one-line reason if it cannot."""
    import torch

    root = Path(root)
    reason = unavailable(root, manifest)
    if reason:
        raise RuntimeError(reason)
    path = _trunk_path(root, manifest)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _CACHE:
        return _CACHE[key]
    import warnings

    import lpips

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision's 'pretrained' deprecation inside lpips
        model = lpips.LPIPS(net="alex", version="0.1", pretrained=True, pnet_rand=True, verbose=False)
    heads_path = Path(lpips.__file__).parent / "weights" / "v0.1" / "alex.pth"
    heads = torch.load(heads_path, map_location="cpu", weights_only=True)
    head_keys = {k for k in model.state_dict() if k.startswith("lin") and not k.startswith("lins.")}
    if set(heads) != head_keys:
        raise RuntimeError(f"lpips heads {heads_path} do not match the model ({sorted(heads)[:3]}...)")
    model.load_state_dict(heads, strict=False)
    try:
        model.net.load_state_dict(_trunk_state(path), strict=True)
    except (RuntimeError, ValueError) as e:
        raise RuntimeError(f"{path.name} is not an AlexNet state dict: {str(e).splitlines()[0]}") from None
    model.eval()
    _CACHE.clear()
    _CACHE[key] = model
    return model


def lpips_distance(frames: np.ndarray, reference: np.ndarray, model) -> float:
    """Mean over frames of LPIPS(frame, reference frame); inputs (T, H, W, 3), uint8 or [0, 1]."""
    import torch

    from .paired import as_unit

    a, b = as_unit(frames), as_unit(reference)
    if a.shape != b.shape:
        raise ValueError(f"frame shapes differ: {a.shape} vs baseline {b.shape}")
    if min(a.shape[1], a.shape[2]) < MIN_SIDE:
        raise ValueError(f"LPIPS (AlexNet) needs frames of at least {MIN_SIDE}x{MIN_SIDE}, got {a.shape[1]}x{a.shape[2]}")

    def tensor(x: np.ndarray):
        return torch.from_numpy(x * 2.0 - 1.0).float().permute(0, 3, 1, 2).contiguous()

    with torch.no_grad():
        d = model(tensor(a), tensor(b))
    return float(d.flatten().mean())


__all__ = ["METRIC", "MIN_SIDE", "TRUNK_KEY", "load_model", "lpips_distance", "unavailable"]
