"""Procedural clips for tiny-shapes: one or two flat-coloured shapes moving on a plain background.

Geometry, in pixels of a `size`-pixel frame (figures below are for the reference size 32; object
sizes, speed and growth rate scale with size / 32 so larger frames show the same clip):

* An object's *position* is its area centroid, so the centroid of the rendered pixels follows the
  stated trajectory exactly (up to anti-aliasing): x_t = x_0 + v_x t, y_t = y_0 + v_y t, y downwards.
* Its *extent* s is the circle's diameter, the square's side, the triangle's base and height (an
  upright isosceles triangle, apex up). Drawn uniformly from [8, 12] px; growing objects start at
  [7, 9] px and gain 1.5 px of extent per frame (radius / half side +0.75 px per frame).
* Moving objects travel `speed` = 2.5 px/frame (17.5 px over 8 frames); static and growing ones
  stay put.
* Start position is uniform over every position that keeps the object's box at least 1 px inside
  the frame in every frame.
* Edges are anti-aliased by 4x4 supersampling (per-pixel coverage, alpha-blended over the
  background).

Everything is deterministic in `seed` (numpy PCG64). No torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .grammar import BACKGROUNDS, COLORS, ClipSpec, ObjectSpec, _all_specs, parse_prompt

REFERENCE_SIZE = 32
SPEED = 2.5                 # px/frame at size 32
GROW_RATE = 1.5             # px of extent per frame at size 32
SIZE_RANGE = (8.0, 12.0)    # extent of non-growing objects at size 32
GROW_START_RANGE = (7.0, 9.0)
MARGIN = 1.0                # px kept free between the object's box and the frame edge
SUPERSAMPLE = 4

_DIRECTION = {"moving left": (-1, 0), "moving right": (1, 0), "moving up": (0, -1), "moving down": (0, 1)}


def _extents(shape: str, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(left, right, up, down) distances from the centroid to the box edges for extent s."""
    half = s / 2
    if shape == "triangle":
        return half, half, 2 * s / 3, s / 3
    return half, half, half, half


def object_track(obj: ObjectSpec, rng: np.random.Generator, *, frames: int, size: int,
                 speed: float = SPEED) -> np.ndarray:
    """(frames, 3) array of (x, y, extent) per frame for one object; draws extent, x0, y0 from rng."""
    scale = size / REFERENCE_SIZE
    t = np.arange(frames, dtype=np.float64)
    if obj.motion == "growing":
        s = (rng.uniform(*GROW_START_RANGE) + GROW_RATE * t) * scale
    else:
        s = np.full(frames, rng.uniform(*SIZE_RANGE) * scale)
    dx, dy = _DIRECTION.get(obj.motion, (0, 0))
    v = speed * scale
    left, right, up, down = _extents(obj.shape, s)
    margin = MARGIN * scale
    start = []
    for d, lo_ext, hi_ext in ((dx, left, right), (dy, up, down)):
        drift = d * v * t
        lo = np.max(margin + lo_ext - drift)
        hi = np.min(size - margin - hi_ext - drift)
        if lo > hi:
            raise ValueError(f"a {obj.shape} {obj.motion} does not fit a {size}-pixel frame for {frames} frames")
        start.append(rng.uniform(lo, hi))
    x = start[0] + dx * v * t
    y = start[1] + dy * v * t
    return np.stack([x, y, s], axis=1)


def coverage(shape: str, x, y, s, size: int, supersample: int = SUPERSAMPLE) -> np.ndarray:
    """Fraction of each pixel covered by the shape, float32: (size, size) for scalar x, y, s, or
    (T, size, size) for arrays of T values. Pixel (r, c) spans [c, c+1) x [r, r+1); (x, y) is the
    shape's area centroid, s its extent."""
    x, y, s = (np.asarray(v, dtype=np.float64) for v in (x, y, s))
    lead = np.broadcast_shapes(x.shape, y.shape, s.shape)
    x, y, s = (np.broadcast_to(v, lead).reshape(-1, 1, 1) for v in (x, y, s))
    if shape not in ("circle", "square", "triangle"):
        raise ValueError(f"unknown shape {shape!r}")
    out = np.zeros((x.shape[0], size, size), dtype=np.float32)
    # Only the pixels that the shape's box touches in some frame are sampled.
    left, right, up, down = _extents(shape, s)
    c0, c1 = (int(np.clip(v, 0, size)) for v in (np.floor((x - left).min()), np.ceil((x + right).max())))
    r0, r1 = (int(np.clip(v, 0, size)) for v in (np.floor((y - up).min()), np.ceil((y + down).max())))
    if c1 <= c0 or r1 <= r0:
        return out.reshape(*lead, size, size)
    sub = (np.arange(supersample, dtype=np.float64) + 0.5) / supersample
    cols = (np.arange(c0, c1)[:, None] + sub).ravel()
    rows = (np.arange(r0, r1)[:, None] + sub).ravel()
    X, Y = cols[None, None, :] - x, rows[None, :, None] - y
    h = s / 2
    if shape == "circle":
        inside = X * X + Y * Y <= h * h
    elif shape == "square":
        inside = (np.abs(X) <= h) & (np.abs(Y) <= h)
    else:
        # apex at y - 2s/3, base at y + s/3; half width grows from 0 to s/2 over the height s.
        inside = (Y <= s / 3) & (np.abs(X) <= (Y + 2 * s / 3) / 2)
    win = inside.reshape(-1, r1 - r0, supersample, c1 - c0, supersample).sum(axis=(2, 4), dtype=np.float32)
    out[:, r0:r1, c0:c1] = win / np.float32(supersample * supersample)
    return out.reshape(*lead, size, size)


def _overlap(a: np.ndarray, b: np.ndarray, sa: str, sb: str) -> bool:
    la, ra, ua, da = _extents(sa, a[:, 2])
    lb, rb, ub, db = _extents(sb, b[:, 2])
    ox = (a[:, 0] - la < b[:, 0] + rb) & (b[:, 0] - lb < a[:, 0] + ra)
    oy = (a[:, 1] - ua < b[:, 1] + db) & (b[:, 1] - ub < a[:, 1] + da)
    return bool(np.any(ox & oy))


def render_clip(spec: ClipSpec | str, *, seed: int, frames: int = 8, size: int = 32,
                speed: float = SPEED) -> np.ndarray:
    """Render a clip: float32 (frames, size, size, 3) RGB in [0, 1], deterministic in `seed`.

    `spec` may be a prompt string. With two objects, positions are redrawn (up to 20 times) until
    their boxes do not overlap in any frame; the second object is drawn over the first.
    """
    if isinstance(spec, str):
        spec = parse_prompt(spec)
    if frames < 1 or size < 8:
        raise ValueError(f"need frames >= 1 and size >= 8, got frames={frames}, size={size}")
    rng = np.random.default_rng(seed)
    tracks = [object_track(o, rng, frames=frames, size=size, speed=speed) for o in spec.objects]
    if len(tracks) == 2:
        for _ in range(20):
            if not _overlap(tracks[0], tracks[1], spec.objects[0].shape, spec.objects[1].shape):
                break
            tracks[1] = object_track(spec.objects[1], rng, frames=frames, size=size, speed=speed)
    out = np.empty((frames, size, size, 3), dtype=np.float32)
    out[:] = np.asarray(BACKGROUNDS[spec.background], dtype=np.float32)
    for obj, track in zip(spec.objects, tracks):
        color = np.asarray(COLORS[obj.color], dtype=np.float32)
        a = coverage(obj.shape, track[:, 0], track[:, 1], track[:, 2], size)[..., None]
        out = out * (1 - a) + color * a
    return np.clip(out, 0.0, 1.0, out=out)


def batch(n: int, *, seed: int, frames: int = 8, size: int = 32,
          prompts: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """A training batch: (clips float32 (n, frames, size, size, 3), canonical prompts).

    Prompts are drawn uniformly with replacement from `prompts` (default: every single-object prompt
    of the grammar), each clip with its own render seed; all deterministic in `seed`. Pass a pool
    without the evaluation prompts to hold them out.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    specs = list(_all_specs(True)) if prompts is None else [parse_prompt(p) for p in prompts]
    if not specs:
        raise ValueError("empty prompt pool")
    rng = np.random.default_rng(seed)
    idx = rng.integers(len(specs), size=n)
    clip_seeds = rng.integers(2**31 - 1, size=n)
    clips = np.empty((n, frames, size, size, 3), dtype=np.float32)
    names = []
    for i, (j, s) in enumerate(zip(idx, clip_seeds)):
        clips[i] = render_clip(specs[j], seed=int(s), frames=frames, size=size)
        names.append(specs[j].prompt)
    return clips, names
