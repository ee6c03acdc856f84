"""Region packing for DraftAttention2: video tokens -> connected spatial regions -> contiguous blocks.

Why: the draft ranks *region pairs*, and a kernel executes *blocks* of B consecutive tokens. Packing
each frame's regions into their own B-token blocks makes the two the same thing, so one draft score
decides one physical block pair (DraftAttention2, §3.3 and §C.2: "frames are partitioned into
connected regions and packed into contiguous blocks; valid-token counts exclude padding, and an
inverse index map restores output order").

The partition of one H x W frame:

* n = ceil(H·W / B) regions of balanced sizes (q or q + 1 tokens, all <= B), so a frame carries
  less than one block of padding (§3.3: "less than one block of total padding per frame").
* Regions are consecutive runs of one Hamiltonian path through the frame whose every step moves to
  a 4-neighbour, so every region is connected. The path walks row bands of height ≈ sqrt(q)
  column by column (a banded boustrophedon), which makes regions compact: for the 16 x 16
  synthetic frames it gives exact 8 x 8 squares (B = 64) and 16 x 8 halves (B = 128). This is a
  compact construction, not the seed's perimeter-minimising search (anemoi's `ragged_2d.py`).

Parity detail (a grid fact, not a tuning choice): a band walked column by column enters at the top
of its first column and must leave at the bottom (to step into the next band). With an odd number
of columns plain column serpentines do that. With an even width and odd height the frame is walked
transposed (its "width" is then odd). With both even, bands get even heights and alternate two
shapes that finish their last column pair row by row (see `_band_path`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch

BLOCK_SIZES = (64, 128)


@dataclass(frozen=True)
class VideoGeometry:
    """Where the video tokens sit in the attention sequence.

    Tokens are ordered ``prefix`` non-video tokens (text, image or other conditioning, kept dense at
    16 bit and outside the sparsity/precision budget, §C.1), then ``frames`` x ``height`` x
    ``width`` video tokens, row-major (frame, row, column) — the layout of diffusers' video DiTs and
    of `diagnostics.synthetic.grid_positions`. A model whose text follows the video rotates it to
    the front before the call.
    """

    frames: int
    height: int
    width: int
    prefix: int = 0

    def __post_init__(self):
        for name in ("frames", "height", "width"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"VideoGeometry.{name} must be a positive integer, got {value!r}")
        if type(self.prefix) is not int or self.prefix < 0:
            raise ValueError(f"VideoGeometry.prefix must be a non-negative integer, got {self.prefix!r}")

    @property
    def frame_tokens(self) -> int:
        return self.height * self.width

    @property
    def video_tokens(self) -> int:
        return self.frames * self.frame_tokens

    @property
    def tokens(self) -> int:
        return self.prefix + self.video_tokens


# ------------------------------------------------------------------------------- one frame's regions


def _balanced(total: int, parts: int) -> list[int]:
    """`parts` integers summing to `total`, differing by at most one, larger ones first."""
    base, extra = divmod(total, parts)
    return [base + 1] * extra + [base] * (parts - extra)


def _band_path(rows: range, cols: list[int], shape: str) -> list[tuple[int, int]]:
    """Cells of one band, every step to a 4-neighbour, entering at the top row.

    "serpentine" (odd column count): columns in order, alternately down and up; enters at the top
    of cols[0], leaves at the bottom of cols[-1].
    "even-a" (even column count, even height): serpentine over cols[:-2] (ends at the top of
    cols[-3]), then the last pair row by row, zigzagging; leaves at the bottom of cols[-2].
    "even-b" (the mirror image, entered at the top of cols[1]): the first pair row by row, leaving
    it at the bottom of cols[1], then serpentine over cols[2:] starting upward; leaves at the
    bottom of cols[-1].
    """
    down, up = list(rows), list(reversed(rows))

    def serpentine(columns: list[int], first_down: bool) -> list[tuple[int, int]]:
        return [(r, c) for j, c in enumerate(columns) for r in (down if (j % 2 == 0) == first_down else up)]

    def zigzag(left: int, right: int) -> list[tuple[int, int]]:
        return [cell for i, r in enumerate(rows) for cell in (((r, left), (r, right)) if i % 2 == 0 else ((r, right), (r, left)))]

    if shape == "serpentine":
        return serpentine(cols, first_down=True)
    if shape == "even-a":
        return serpentine(cols[:-2], first_down=True) + zigzag(cols[-2], cols[-1])
    return zigzag(cols[1], cols[0]) + serpentine(cols[2:], first_down=False)


def frame_path(height: int, width: int, band_height: float) -> list[tuple[int, int]]:
    """A Hamiltonian path of (row, column) cells through a height x width frame, in row bands of
    about `band_height` rows; consecutive cells are 4-neighbours (see the module docstring)."""
    transpose = width % 2 == 0 and height % 2 == 1
    h, w = (width, height) if transpose else (height, width)
    even = w % 2 == 0  # then h is even too
    unit = 2 if even else 1  # band heights are multiples of this
    bands = min(max(1, round(h / band_height)), h // unit)
    heights = [unit * x for x in _balanced(h // unit, bands)]
    path: list[tuple[int, int]] = []
    top = 0
    for k, bh in enumerate(heights):
        cols = list(range(w)) if k % 2 == 0 else list(range(w - 1, -1, -1))
        shape = "serpentine" if not even else ("even-a" if k % 2 == 0 else "even-b")
        path += _band_path(range(top, top + bh), cols, shape)
        top += bh
    return [(c, r) for r, c in path] if transpose else path


@lru_cache(maxsize=64)
def frame_regions(height: int, width: int, block: int) -> tuple[tuple[int, ...], ...]:
    """Connected regions of one frame as tuples of raster token ids (row * width + column), in
    path order; ceil(H·W / block) regions of balanced sizes, each at most `block` tokens."""
    tokens = height * width
    n = math.ceil(tokens / block)
    sizes = _balanced(tokens, n)
    path = frame_path(height, width, band_height=math.sqrt(sizes[-1]))
    ids = [r * width + c for r, c in path]
    regions, start = [], 0
    for size in sizes:
        regions.append(tuple(ids[start : start + size]))
        start += size
    return tuple(regions)


# ---------------------------------------------------------------------------------- the packed layout


@dataclass(frozen=True, eq=False)
class PackedLayout:
    """Video tokens packed region by region into contiguous blocks of `block` slots.

    `gather[s]`: the video-token index (0-based within the video tokens) in packed slot s, or -1 for
    padding. `inverse[t]`: the packed slot of video token t, so ``packed[..., inverse, :]`` restores
    the original order. `counts[r]`: real (non-padding) tokens in region block r — padding is never
    counted. Region blocks are ordered frame by frame, then along each frame's path.
    """

    geometry: VideoGeometry
    block: int
    gather: torch.Tensor  # (R * block,) int64
    inverse: torch.Tensor  # (video_tokens,) int64
    counts: torch.Tensor  # (R,) int64
    frame_of_region: torch.Tensor  # (R,) int64

    @property
    def regions(self) -> int:
        return int(self.counts.numel())

    @property
    def slots(self) -> int:
        return self.regions * self.block

    @cached_property
    def valid(self) -> torch.Tensor:
        """(R, block) bool: which slots hold a real token."""
        return (self.gather >= 0).view(self.regions, self.block)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(..., video_tokens, D) -> (..., R * block, D), padding slots zero."""
        gathered = x.index_select(-2, self.gather.clamp(min=0).to(x.device))
        return gathered * (self.gather >= 0).to(x.device, x.dtype).unsqueeze(-1)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """(..., R * block, D) -> (..., video_tokens, D): the inverse of `pack` on real tokens."""
        return packed.index_select(-2, self.inverse.to(packed.device))


def pack_layout(geometry: VideoGeometry, block: int) -> PackedLayout:
    """The packed layout of `geometry`'s video tokens in blocks of `block` (64 or 128) slots."""
    if block not in BLOCK_SIZES:
        raise ValueError(f"block must be one of {BLOCK_SIZES}, got {block!r}")
    regions = frame_regions(geometry.height, geometry.width, block)
    per_frame = len(regions)
    gather = torch.full((geometry.frames * per_frame * block,), -1, dtype=torch.int64)
    counts = torch.tensor([len(r) for r in regions] * geometry.frames, dtype=torch.int64)
    for f in range(geometry.frames):
        offset = f * geometry.frame_tokens
        for i, region in enumerate(regions):
            slot = (f * per_frame + i) * block
            gather[slot : slot + len(region)] = torch.tensor(region, dtype=torch.int64) + offset
    inverse = torch.empty(geometry.video_tokens, dtype=torch.int64)
    real = (gather >= 0).nonzero().squeeze(-1)
    inverse[gather[real]] = real
    frame_of_region = torch.arange(geometry.frames).repeat_interleave(per_frame)
    return PackedLayout(geometry, block, gather, inverse, counts, frame_of_region)
