"""Prompt adherence of a tiny-shapes clip, measured from its pixels alone.

For a single-object spec, `score_clip` detects:

* background: per-channel median of the 1-pixel frame border over all frames (the renderer keeps
  objects >= 1 px off the border; a median ignores a generated object that touches it);
* foreground, per frame: pixels whose RGB distance from the background exceeds half the object's
  contrast -- the 99th percentile of that distance over the clip, i.e. the object's interior, since
  an object covers >= 4% of a frame -- and at least FG_MIN_THRESHOLD (0.25). Half the contrast is
  the 50%-coverage line of an anti-aliased edge, so the mask's area is unbiased; the palette's
  smallest contrast is 0.71 (orange on gray), giving a threshold of 0.35, 3.5 sigma of per-channel
  noise sigma = 0.1 (whose RGB distance averages 0.16). Then, per frame: connected components
  (4-connectivity) smaller than a quarter of the largest are dropped (noise specks), holes are
  filled, and one-pixel spurs (pixels with at most one 4-neighbour, twice) are pruned so that a
  noise pixel stuck to an edge does not stretch the bounding box. A frame with fewer than MIN_AREA
  pixels or more than MAX_AREA_FRACTION of the frame has no foreground;
* colour: per-channel median over all frames of the foreground's interior (mask eroded by 1 px, so
  anti-aliased edge pixels blended with the background do not pull it) -> nearest palette colour
  (the closest palette pair, orange/red and orange/yellow, is 0.5 apart);
* shape: per frame, the fill ratio of the bounding box (square ~1, circle ~pi/4, triangle ~1/2) and
  the fraction of the area in the lower half of the box (upright triangle ~0.68 once its apex is
  pruned, 3/4 ideally; circle and square 1/2);
  medians over frames, then the nearest of SHAPE_PROTOTYPES (measured on rendered clips);
* motion: Theil-Sen (median of pairwise) slopes of the centroid and of sqrt(area) against frame
  index, in px/frame at size 32 (scaled by size / 32). Speed >= MOVE_THRESHOLD (0.8; rendered
  motion is 2.5, static measures < 0.05) -> moving along the dominant axis; else sqrt(area) slope >=
  GROW_THRESHOLD (0.35; rendered growth measures 1.0-1.5, static < 0.05) -> growing; else static.
  Theil-Sen tolerates a few bad frames.

Clips are float (T, H, W, 3) in [0, 1] (uint8 is divided by 255; values are clipped to [0, 1],
NaN counts as 0). No foreground in at least half of the frames -> every detected value None and
every *_ok False. Two-object specs are not scored: `score_clip` returns None and `score_many` leaves
the clip out of `n` (the pixels of two objects cannot be attributed to the prompt's objects without
guessing which is which).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import ndimage

from .grammar import BACKGROUNDS, COLORS, ClipSpec, parse_prompt

FG_MIN_THRESHOLD = 0.25
CONTRAST_PERCENTILE = 99.0
MIN_AREA = 10                 # px at size 32 (a 7-px circle covers ~38)
MAX_AREA_FRACTION = 0.6
COMPONENT_FRACTION = 0.25
MIN_FRAMES_FRACTION = 0.5
MOVE_THRESHOLD = 0.8          # centroid px/frame at size 32
GROW_THRESHOLD = 0.35         # sqrt(area) px/frame at size 32
# (fill ratio, lower-half fraction) of each shape: medians over every single-object prompt x 2 seeds
# as rendered at 32x32 and segmented as above. Ideal shapes give square (1, 1/2), circle (pi/4, 1/2),
# triangle (1/2, 3/4); the triangle's measured values differ because its one- and two-pixel-wide
# apex rows are pruned as spurs.
SHAPE_PROTOTYPES: dict[str, tuple[float, float]] = {
    "square": (1.0, 0.5),
    "circle": (0.79, 0.5),
    "triangle": (0.665, 0.68),
}

_COLOR_NAMES = list(COLORS)
_COLOR_RGB = np.array([COLORS[c] for c in _COLOR_NAMES])
_BG_NAMES = list(BACKGROUNDS)
_BG_RGB = np.array([BACKGROUNDS[b] for b in _BG_NAMES])
# 4-connectivity within a frame, nothing across frames: one scipy call handles every frame.
_PLANE_CROSS = np.zeros((3, 3, 3), dtype=bool)
_PLANE_CROSS[1] = ndimage.generate_binary_structure(2, 1)


def _as_frames(frames: np.ndarray) -> np.ndarray:
    arr = np.asarray(frames)
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"frames must be (T, H, W, 3), got shape {arr.shape}")
    if arr.shape[1] < 4 or arr.shape[2] < 4:
        raise ValueError(f"frames must be at least 4x4 pixels, got {arr.shape[1]}x{arr.shape[2]}")
    if arr.dtype == np.uint8:
        arr = arr / 255.0
    arr = arr.astype(np.float64)
    arr[np.isnan(arr)] = 0.0
    return np.clip(arr, 0.0, 1.0)


def _background(f: np.ndarray) -> np.ndarray:
    border = np.concatenate([f[:, 0].reshape(-1, 3), f[:, -1].reshape(-1, 3),
                             f[:, 1:-1, 0].reshape(-1, 3), f[:, 1:-1, -1].reshape(-1, 3)])
    return np.median(border, axis=0)


def estimate_background(frames: np.ndarray) -> np.ndarray:
    """(3,) RGB: per-channel median of the 1-pixel border of every frame."""
    return _background(_as_frames(frames))


def _prune_spurs(m: np.ndarray, iterations: int = 2) -> np.ndarray:
    for _ in range(iterations):
        p = np.pad(m, ((0, 0), (1, 1), (1, 1)))
        nb = (p[:, :-2, 1:-1].astype(np.int8) + p[:, 2:, 1:-1] + p[:, 1:-1, :-2] + p[:, 1:-1, 2:])
        m = m & (nb >= 2)
    return m


def _masks(f: np.ndarray, bg: np.ndarray) -> np.ndarray:
    T, H, W, _ = f.shape
    dist = np.sqrt(((f - bg) ** 2).sum(axis=-1))
    thr = max(FG_MIN_THRESHOLD, 0.5 * float(np.percentile(dist, CONTRAST_PERCENTILE)))
    raw = dist > thr
    labels, n = ndimage.label(raw, structure=_PLANE_CROSS)
    if n == 0:
        return raw
    sizes = np.bincount(labels.ravel())
    frame_of = np.zeros(n + 1, dtype=np.intp)
    frame_of[labels.ravel()] = np.repeat(np.arange(T), H * W)
    largest = np.zeros(T)
    np.maximum.at(largest, frame_of[1:], sizes[1:])
    keep = sizes >= COMPONENT_FRACTION * largest[frame_of]
    keep[0] = False
    m = ndimage.binary_fill_holes(keep[labels], structure=_PLANE_CROSS)
    m = _prune_spurs(m)
    area = m.sum(axis=(1, 2))
    ok = (area >= MIN_AREA * H * W / 1024) & (area <= MAX_AREA_FRACTION * H * W)
    m[~ok] = False
    return m


def foreground_masks(frames: np.ndarray) -> np.ndarray:
    """(T, H, W) bool foreground per frame (all False in frames judged to have no object)."""
    f = _as_frames(frames)
    return _masks(f, _background(f))


def _theil_sen(t: np.ndarray, y: np.ndarray) -> float:
    i, j = np.triu_indices(len(t), k=1)
    return float(np.median((y[j] - y[i]) / (t[j] - t[i])))


def _nearest(rgb: np.ndarray, names: list[str], table: np.ndarray) -> str:
    return names[int(np.argmin(np.linalg.norm(table - rgb, axis=1)))]


def _shape_features(m: np.ndarray) -> tuple[float, float]:
    rows, cols = np.nonzero(m)
    top = rows.min()
    h, w = rows.max() + 1 - top, cols.max() + 1 - cols.min()
    fill = len(rows) / (h * w)
    mid = top + h / 2
    lower = np.clip(rows + 1 - mid, 0.0, 1.0).sum() / len(rows)  # a row straddling the middle counts half
    return float(fill), float(lower)


def classify_shape(fill: float, lower: float) -> str:
    """Nearest shape prototype in (fill ratio, lower-half fraction)."""
    return min(SHAPE_PROTOTYPES, key=lambda s: np.hypot(fill - SHAPE_PROTOTYPES[s][0], lower - SHAPE_PROTOTYPES[s][1]))


def detect(frames: np.ndarray) -> dict:
    """What the clip shows, assuming one object: background, color, shape, motion (None when not
    detected) and the measurements behind them (rgb, fill, lower_fraction, velocity [vx, vy] and
    growth in px/frame at size 32, foreground_frames). Plain Python values (JSON-ready)."""
    f = _as_frames(frames)
    T, H, W, _ = f.shape
    scale = np.sqrt(H * W) / 32
    bg = _background(f)
    masks = _masks(f, bg)
    valid = np.flatnonzero(masks.any(axis=(1, 2)))
    out: dict = {"background": _nearest(bg, _BG_NAMES, _BG_RGB), "background_rgb": [float(v) for v in bg],
                 "color": None, "shape": None, "motion": None, "rgb": None, "fill": None,
                 "lower_fraction": None, "velocity": None, "growth": None, "foreground_frames": int(len(valid))}
    if len(valid) == 0 or len(valid) < MIN_FRAMES_FRACTION * T:
        return out
    mv = masks[valid]

    inner = ndimage.binary_erosion(mv, structure=_PLANE_CROSS)
    thin = inner.sum(axis=(1, 2)) < 4
    inner[thin] = mv[thin]
    rgb = np.median(f[valid][inner], axis=0)
    out["rgb"] = [float(v) for v in rgb]
    out["color"] = _nearest(rgb, _COLOR_NAMES, _COLOR_RGB)

    fill, lower = np.median(np.array([_shape_features(m) for m in mv]), axis=0)
    out["fill"], out["lower_fraction"] = float(fill), float(lower)
    out["shape"] = classify_shape(fill, lower)

    if len(valid) >= 2:
        ys, xs = np.indices((H, W)) + 0.5
        area = mv.sum(axis=(1, 2)).astype(np.float64)
        cx, cy = (mv * xs).sum(axis=(1, 2)) / area, (mv * ys).sum(axis=(1, 2)) / area
        tv = valid.astype(np.float64)
        vx, vy = _theil_sen(tv, cx) / scale, _theil_sen(tv, cy) / scale
        growth = _theil_sen(tv, np.sqrt(area)) / scale
        out["velocity"], out["growth"] = [vx, vy], growth
        if np.hypot(vx, vy) >= MOVE_THRESHOLD:
            if abs(vx) >= abs(vy):
                out["motion"] = "moving right" if vx > 0 else "moving left"
            else:
                out["motion"] = "moving down" if vy > 0 else "moving up"
        elif growth >= GROW_THRESHOLD:
            out["motion"] = "growing"
        else:
            out["motion"] = "static"
    return out


def score_clip(frames: np.ndarray, spec: ClipSpec | str) -> dict | None:
    """`detect(frames)` plus color_ok / shape_ok / motion_ok / background_ok against `spec` (a
    ClipSpec or prompt). Returns None for a two-object spec (not scored; see the module docstring)."""
    if isinstance(spec, str):
        spec = parse_prompt(spec)
    if not spec.single_object:
        return None
    d = detect(frames)
    obj = spec.objects[0]
    d["color_ok"] = d["color"] == obj.color
    d["shape_ok"] = d["shape"] == obj.shape
    d["motion_ok"] = d["motion"] == obj.motion
    d["background_ok"] = d["color"] is not None and d["background"] == spec.background
    return d


def score_many(clips: Sequence[np.ndarray] | np.ndarray, specs: Sequence[ClipSpec | str]) -> dict:
    """{"color_accuracy", "motion_accuracy", "shape_accuracy", "n"}: fractions over the scored
    (single-object) clips; n is how many were scored; accuracies are None when n == 0."""
    if len(clips) != len(specs):
        raise ValueError(f"{len(clips)} clips but {len(specs)} specs")
    scores = [s for s in (score_clip(c, p) for c, p in zip(clips, specs)) if s is not None]
    n = len(scores)

    def acc(key: str) -> float | None:
        return sum(bool(s[key]) for s in scores) / n if n else None

    return {"color_accuracy": acc("color_ok"), "motion_accuracy": acc("motion_ok"),
            "shape_accuracy": acc("shape_ok"), "n": n}
