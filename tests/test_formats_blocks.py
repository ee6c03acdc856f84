"""Block layout helpers (lowbit_video.formats._blocks): axis moves, zero padding, exact inverse."""

import pytest
import torch

from lowbit_video.formats._blocks import check_input, float32_scale, from_blocks, make_layout, to_blocks


def test_layout_ragged_last_axis():
    lay = make_layout((3, 47), -1, 32)
    assert (lay.axis, lay.block, lay.n_blocks, lay.pad) == (1, 32, 2, 17)
    assert lay.scale_shape == (3, 2) and lay.blocked_shape == (3, 2, 32)


def test_layout_axis0_and_per_token():
    lay = make_layout((47, 5), 0, 32)
    assert lay.blocked_shape == (5, 2, 32)
    tok = make_layout((2, 7, 33), -1, None)  # one block over the whole axis
    assert tok.blocked_shape == (2, 7, 1, 33) and tok.pad == 0


def test_to_blocks_places_elements_and_pads_with_zeros():
    x = torch.arange(1, 48, dtype=torch.float64).reshape(1, 47)  # values 1..47, index i holds i + 1
    b = to_blocks(x, make_layout(x.shape, -1, 32))
    assert b.shape == (1, 2, 32)
    # element j of block k is original index 32k + j; indices >= 47 are zero padding
    assert b[0, 0].tolist() == list(range(1, 33))
    assert b[0, 1].tolist() == list(range(33, 48)) + [0.0] * 17


def test_to_blocks_along_axis_minus2():
    x = torch.arange(40, dtype=torch.float32).reshape(2, 10, 2)  # blocks of 4 along the middle axis
    b = to_blocks(x, make_layout(x.shape, -2, 4))
    assert b.shape == (2, 2, 3, 4)
    assert b[1, 0, 2].tolist() == [x[1, 8, 0].item(), x[1, 9, 0].item(), 0.0, 0.0]
    assert b[0, 1, 0].tolist() == [x[0, i, 1].item() for i in range(4)]


@pytest.mark.parametrize(
    "shape,axis,block",
    [((47,), 0, 32), ((3, 47), -1, 32), ((47, 5), 0, 32), ((2, 33, 3, 4), 1, 16), ((2, 3, 5), -1, None),
     ((4, 6), 1, 3), ((3, 0), -1, None), ((0, 5), -1, 2)],
)
def test_from_blocks_is_exact_inverse(shape, axis, block):
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    lay = make_layout(shape, axis, block)
    y = from_blocks(to_blocks(x, lay), lay)
    assert y.shape == x.shape and torch.equal(y, x)


@pytest.mark.parametrize("block", [0, -3, 2.0, True])
def test_bad_block_rejected(block):
    with pytest.raises(ValueError):
        make_layout((4, 4), -1, block)


def test_bad_axis_and_scalar_rejected():
    with pytest.raises(ValueError):
        make_layout((4, 4), 2, 2)
    with pytest.raises(ValueError):
        make_layout((), -1, 2)


def test_check_input():
    check_input(torch.ones(3))
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="NaN or Inf"):
            check_input(torch.tensor([1.0, bad]))
    with pytest.raises(TypeError):
        check_input(torch.ones(3, dtype=torch.int32))


def test_float32_scale_zero_becomes_one():
    s = float32_scale(torch.tensor([0.0, 0.5, 1e-60], dtype=torch.float64))  # 1e-60 underflows float32
    assert s.dtype == torch.float32 and s.tolist() == [1.0, 0.5, 1.0]
