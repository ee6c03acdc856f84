"""Weight-free paired fidelity of a run against its baseline: PSNR, SSIM, frame cosine.

All three take two clips of the same shape (T, H, W, 3), uint8 (divided by 255) or float in [0, 1],
score each frame pair, and return the mean over frames -- the papers' "averaged over frames"
convention, which weighs every frame equally whatever its content.

* PSNR: skimage.metrics.peak_signal_noise_ratio with data_range=1 per frame, i.e.
  10 log10(1 / MSE). A frame identical to its baseline has infinite PSNR, which no mean or JSON can
  hold, so it is scored PSNR_CAP(frame) = 10 log10(H*W*3 * 255^2): the PSNR of the smallest difference
  two uint8 frames can have (one channel of one pixel off by one level). "Identical" thus scores just
  above anything measurable, and a recipe that leaves the video unchanged gets a large, finite value.
* SSIM: skimage.metrics.structural_similarity(data_range=1, channel_axis=-1) per frame with
  scikit-image's defaults (7x7 uniform window, K1=0.01, K2=0.03); frames need H, W >= 7.
* cosine: per frame, the cosine of the angle between the two frames flattened to vectors of H*W*3
  values in [0, 1]: <a, b> / (|a| |b|). Values are non-negative, so it lies in [0, 1]; 1 iff one
  frame is a positive multiple of the other. Two all-black frames count as identical (1.0); an
  all-black frame against a non-black one as 0.0 (no direction in common).
* MSE: per frame, the mean squared difference on the 0–255 scale (the scale of the RotateAttention
  paper's MSE column, whose FP16-relative values are in the hundreds); 0 for identical frames.
"""

from __future__ import annotations

import math

import numpy as np


def as_unit(frames: np.ndarray) -> np.ndarray:
    """(T, H, W, 3) float64 in [0, 1] (uint8 is divided by 255)."""
    arr = np.asarray(frames)
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"frames must be (T, H, W, 3), got shape {arr.shape}")
    return arr / 255.0 if arr.dtype == np.uint8 else arr.astype(np.float64)


def _pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = as_unit(a), as_unit(b)
    if a.shape != b.shape:
        raise ValueError(f"frame shapes differ: {a.shape} vs baseline {b.shape}")
    return a, b


def psnr_cap(height: int, width: int) -> float:
    """PSNR of one uint8 level of difference in one channel of one pixel: 10 log10(H*W*3 * 255^2)."""
    return 10.0 * math.log10(height * width * 3 * 255.0 ** 2)


def psnr(frames: np.ndarray, reference: np.ndarray) -> float:
    from skimage.metrics import peak_signal_noise_ratio

    a, b = _pair(frames, reference)
    cap = psnr_cap(a.shape[1], a.shape[2])
    vals = []
    for x, y in zip(a, b):
        if np.array_equal(x, y):
            vals.append(cap)
        else:
            vals.append(min(cap, float(peak_signal_noise_ratio(y, x, data_range=1.0))))
    return float(np.mean(vals))


def ssim(frames: np.ndarray, reference: np.ndarray) -> float:
    from skimage.metrics import structural_similarity

    a, b = _pair(frames, reference)
    if min(a.shape[1], a.shape[2]) < 7:
        raise ValueError(f"SSIM needs frames of at least 7x7 pixels, got {a.shape[1]}x{a.shape[2]}")
    return float(np.mean([structural_similarity(x, y, data_range=1.0, channel_axis=-1) for x, y in zip(a, b)]))


def cosine(frames: np.ndarray, reference: np.ndarray) -> float:
    a, b = _pair(frames, reference)
    x, y = a.reshape(len(a), -1), b.reshape(len(b), -1)
    nx, ny = np.linalg.norm(x, axis=1), np.linalg.norm(y, axis=1)
    dots = np.einsum("ij,ij->i", x, y)
    both_zero, one_zero = (nx == 0) & (ny == 0), (nx == 0) ^ (ny == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(both_zero, 1.0, np.where(one_zero, 0.0, dots / (nx * ny)))
    return float(np.mean(np.clip(cos, -1.0, 1.0)))


def mse(frames: np.ndarray, reference: np.ndarray) -> float:
    a, b = _pair(frames, reference)
    return float(np.mean(((a - b) * 255.0) ** 2, axis=(1, 2, 3)).mean())


__all__ = ["as_unit", "cosine", "mse", "psnr", "psnr_cap", "ssim"]
