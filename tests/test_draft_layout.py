"""DraftAttention2 region packing: connected regions, full B-token blocks, padding excluded, and
reorder -> restore is the identity."""

import math

import pytest
import torch

from lowbit_video.draft.layout import VideoGeometry, frame_path, frame_regions, pack_layout


def cells(region, width):
    return {divmod(t, width) for t in region}


def connected(region, width):
    todo = cells(region, width)
    stack = [todo.pop()]
    while stack:
        r, c = stack.pop()
        for nb in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if nb in todo:
                todo.remove(nb)
                stack.append(nb)
    return not todo


def rect(rows, cols):
    return {(r, c) for r in rows for c in cols}


@pytest.mark.parametrize("height, width", [(1, 1), (1, 8), (7, 1), (2, 2), (4, 6), (5, 6), (6, 5), (7, 9), (16, 16), (45, 80)])
@pytest.mark.parametrize("band", [1.0, 3.0, 8.0, 100.0])
def test_frame_path_visits_every_cell_once_through_neighbours(height, width, band):
    path = frame_path(height, width, band)
    assert sorted(path) == sorted((r, c) for r in range(height) for c in range(width))
    for (r0, c0), (r1, c1) in zip(path, path[1:]):
        assert abs(r0 - r1) + abs(c0 - c1) == 1


@pytest.mark.parametrize("block", [64, 128])
@pytest.mark.parametrize("height, width", [(1, 1), (3, 5), (6, 11), (8, 8), (9, 30), (16, 16), (30, 52), (45, 80), (48, 80), (17, 64)])
def test_regions_are_connected_balanced_and_pad_less_than_one_block(height, width, block):
    regions = frame_regions(height, width, block)
    tokens = height * width
    assert len(regions) == math.ceil(tokens / block)
    assert sorted(t for r in regions for t in r) == list(range(tokens))  # an exact cover
    sizes = [len(r) for r in regions]
    assert max(sizes) <= block and max(sizes) - min(sizes) <= 1
    assert len(regions) * block - tokens < block  # less than one block of padding per frame (§3.3)
    assert all(connected(r, width) for r in regions)


def test_synthetic_frames_split_into_squares_and_halves():
    # 16 x 16 tokens: 64-token regions are the four 8 x 8 quadrants, 128-token ones the 16 x 8 halves.
    q64 = [cells(r, 16) for r in frame_regions(16, 16, 64)]
    quadrants = [rect(rs, cs) for rs in (range(8), range(8, 16)) for cs in (range(8), range(8, 16))]
    assert sorted(map(sorted, q64)) == sorted(map(sorted, quadrants))
    q128 = [cells(r, 16) for r in frame_regions(16, 16, 128)]
    assert sorted(map(sorted, q128)) == sorted(map(sorted, [rect(range(16), range(8)), rect(range(16), range(8, 16))]))
    # 8 x 16 at B = 64: the left and right 8 x 8 halves, left first.
    left, right = (cells(r, 16) for r in frame_regions(8, 16, 64))
    assert (left, right) == (rect(range(8), range(8)), rect(range(8), range(8, 16)))


@pytest.mark.parametrize("geometry, block", [
    (VideoGeometry(3, 6, 11), 64),  # 66 tokens/frame: 2 regions of 33, 31 padding slots each
    (VideoGeometry(2, 16, 16, prefix=9), 128),
    (VideoGeometry(1, 45, 80), 64),  # Wan 720p latent frame: 57 regions of 63/64 tokens
])
def test_pack_then_unpack_is_identity_with_full_blocks(geometry, block):
    layout = pack_layout(geometry, block)
    per_frame = math.ceil(geometry.frame_tokens / block)
    assert layout.regions == geometry.frames * per_frame
    x = torch.randn(2, 3, geometry.video_tokens, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    packed = layout.pack(x)
    assert packed.shape == (2, 3, layout.regions * block, 5)  # whole B-token blocks
    assert torch.equal(layout.unpack(packed), x)
    # Counts are real tokens only; padding slots hold zeros and no token.
    assert int(layout.counts.sum()) == geometry.video_tokens
    assert torch.equal(layout.valid.sum(dim=-1), layout.counts)
    assert torch.equal(packed.unflatten(-2, (layout.regions, block))[:, :, ~layout.valid], torch.zeros(2, 3, int((~layout.valid).sum()), 5, dtype=torch.float64))
    real = layout.gather[layout.gather >= 0]
    assert sorted(real.tolist()) == list(range(geometry.video_tokens))
    # Every region block holds tokens of one frame only.
    frame_of_token = layout.gather.view(layout.regions, block) // geometry.frame_tokens
    for r in range(layout.regions):
        assert set(frame_of_token[r][layout.valid[r]].tolist()) == {int(layout.frame_of_region[r])}


def test_geometry_is_validated():
    with pytest.raises(ValueError, match="frames"):
        VideoGeometry(0, 16, 16)
    with pytest.raises(ValueError, match="prefix"):
        VideoGeometry(1, 16, 16, prefix=-1)
    with pytest.raises(ValueError, match="block"):
        pack_layout(VideoGeometry(1, 16, 16), 96)
    assert VideoGeometry(4, 16, 16, prefix=3).tokens == 1027
