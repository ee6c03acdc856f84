"""INT8 / INT4, symmetric and affine, per token or per block. References: numpy (np.rint rounds half to even)."""

import math

import numpy as np
import pytest
import torch

from lowbit_video.formats import intq


def ref_block(xb, bits, scheme):
    """(codes, float32 scale, zero point, dequantized) of one block, per the formulas in the brief/numerics.md §6."""
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if scheme == "symmetric":
        s = np.float64(np.float32(np.abs(xb).max() / qmax)) or 1.0
        codes = np.clip(np.rint(xb / s), -qmax, qmax)
        return codes, s, 0.0, codes * s
    lo, hi = min(xb.min(), 0.0), max(xb.max(), 0.0)
    s = np.float64(np.float32((hi - lo) / (2**bits - 1))) or 1.0
    zp = qmin - np.rint(lo / s)
    codes = np.clip(np.rint(xb / s) + zp, qmin, qmax)
    return codes, s, zp, s * (codes - zp)


def _data(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * torch.exp2(torch.randint(-6, 6, shape, generator=g).float())


def test_hand_symmetric_int8():
    # amax 7.9375 = 127 / 16 -> scale 1/16 (exact): 0.15625 = 2.5 steps -> 2, 0.21875 = 3.5 -> 4, 0.03125 = 0.5 -> 0
    x = torch.tensor([[7.9375, 0.15625, 0.21875, -0.15625, -7.9375, 0.03125]])
    t = intq.quantize(x, bits=8)
    assert t.scales.tolist() == [[0.0625]] and t.zero_points is None
    assert t.codes.tolist() == [[[127, 2, 4, -2, -127, 0]]]
    assert t.dequantize().tolist() == [[7.9375, 0.125, 0.25, -0.125, -7.9375, 0.0]]


def test_hand_symmetric_int4():
    # amax 1.75 = 7 * 0.25 -> scale 0.25: 0.375 = 1.5 -> 2, 0.625 = 2.5 -> 2, -1 -> -4, 0.1 = 0.4 -> 0
    t = intq.quantize(torch.tensor([[1.75, 0.375, 0.625, -1.0, 0.1]]), bits=4)
    assert t.scales.tolist() == [[0.25]] and t.codes.tolist() == [[[7, 2, 2, -4, 0]]]


def test_hand_affine_int4():
    # lo -1.5, hi 2.25 -> scale 3.75 / 15 = 0.25; zp = -8 - (-6) = -2; 0.625 = 2.5 steps -> 2 (tie) + zp = 0
    t = intq.quantize(torch.tensor([[-1.5, 0.0, 0.625, 2.25]]), bits=4, scheme="affine")
    assert t.scales.tolist() == [[0.25]] and t.zero_points.tolist() == [[-2]]
    assert t.codes.tolist() == [[[-8, -2, 0, 7]]]
    assert t.dequantize().tolist() == [[-1.5, 0.0, 0.5, 2.25]]


def test_affine_int4_non_negative_uses_all_16_codes():
    # RotateAttention's range-rectified P~: data in [0, m] -> scale m / 15, zero point -8, codes span [-8, 7]
    m = 3.75
    t = intq.quantize(torch.arange(16.0).reshape(1, 16) * 0.25, bits=4, scheme="affine")
    assert t.scales.item() == m / 15 and t.zero_points.item() == -8
    assert t.codes.flatten().tolist() == list(range(-8, 8))
    p = torch.rand(4, 1000, generator=torch.Generator().manual_seed(1)) * 0.7
    t = intq.quantize(p, bits=4, scheme="affine")
    assert torch.all(t.zero_points == -8)
    for row in t.codes:
        assert sorted(set(row.flatten().tolist())) == list(range(-8, 8))


@pytest.mark.parametrize("bits", [4, 8])
def test_symmetric_code_range(bits):
    qmax = 2 ** (bits - 1) - 1
    t = intq.quantize(_data((6, 200), seed=bits), bits=bits)
    assert t.codes.min() >= -qmax and t.codes.max() <= qmax
    assert torch.all(t.codes.abs().amax(dim=(-1, -2)) == qmax)  # the amax element maps to ±qmax


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("scheme", ["symmetric", "affine"])
@pytest.mark.parametrize(
    "shape,axis,block", [((4, 50), -1, None), ((3, 47), -1, 16), ((47, 3), 0, 16), ((2, 33, 3), -2, 8)]
)
def test_matches_reference_ragged(bits, scheme, shape, axis, block):
    x = _data(shape, seed=3)
    t = intq.quantize(x, bits=bits, block=block, axis=axis, scheme=scheme)
    xm = x.movedim(axis, -1).double().numpy()
    deq = t.dequantize().movedim(axis, -1).numpy()
    n = xm.shape[-1]
    step = n if block is None else block
    for k, start in enumerate(range(0, n, step)):
        for idx in np.ndindex(xm.shape[:-1]):
            chunk = xm[idx][start : start + step]  # real elements only: padding must not change the scale
            codes, s, zp, ref = ref_block(chunk, bits, scheme)
            assert t.scales[idx + (k,)].item() == s
            if scheme == "affine":
                assert t.zero_points[idx + (k,)].item() == zp
            np.testing.assert_array_equal(t.codes[idx + (k,)][: len(chunk)].numpy(), codes)
            np.testing.assert_array_equal(deq[idx][start : start + step], ref.astype(np.float32))


def test_all_zero_blocks():
    x = torch.zeros(2, 32)
    x[1, 16:] = 1.0
    for scheme, zero_code in (("symmetric", 0), ("affine", -8)):
        t = intq.quantize(x, bits=4, block=16, scheme=scheme)
        assert t.scales[0].tolist() == [1.0, 1.0] and t.scales[1, 0].item() == 1.0
        assert torch.all(t.codes[0] == zero_code)  # affine: the code of 0 is the zero point, qmin here
        assert torch.equal(t.dequantize()[0], torch.zeros(32))


def test_pack_bytes_by_hand():
    t = intq.quantize(torch.tensor([[-0.125, 0.25, -1.0, 0.875]]), bits=4, scheme="affine")
    # lo -1, hi 0.875 -> scale 1.875 / 15 = 0.125, zp = -8 - (-8) = 0: codes -1, 2, -8, 7
    assert t.codes.tolist() == [[[-1, 2, -8, 7]]]
    assert t.pack().data.tolist() == [[[0x2F, 0x78]]]  # two's-complement nibbles, element 0 low
    t8 = intq.quantize(torch.tensor([[-1.0, 127.0, -127.0]]), bits=8)
    assert t8.pack().data.tolist() == [[[0xFF, 0x7F, 0x81]]]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("scheme", ["symmetric", "affine"])
@pytest.mark.parametrize("shape,block", [((3, 47), 16), ((2, 33), None), ((4, 9), 3)])
def test_pack_round_trip(bits, scheme, shape, block):
    t = intq.quantize(_data(shape, seed=4), bits=bits, block=block, scheme=scheme)
    p = t.pack()
    assert p.data.dtype == torch.uint8
    for u in (p.unpack(), intq.unpack(p)):
        assert torch.equal(u.codes, t.codes) and torch.equal(u.scales, t.scales)
        assert (u.zero_points is None) == (t.zero_points is None)
        if t.zero_points is not None:
            assert torch.equal(u.zero_points, t.zero_points)
        assert torch.equal(u.dequantize(), t.dequantize())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_and_shape_preserved(dtype):
    x = _data((2, 3, 37), seed=5).to(dtype)
    for scheme in ("symmetric", "affine"):
        y = intq.fake_quantize(x, bits=4, block=16, axis=-1, scheme=scheme)
        assert y.dtype == dtype and y.shape == x.shape
        assert intq.quantize(x, bits=8, axis=1, scheme=scheme).dequantize().shape == x.shape


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("scheme", ["symmetric", "affine"])
@pytest.mark.parametrize("block", [None, 16])
def test_fake_quantize_idempotent(bits, scheme, block):
    # float64 holds scale * (code - zp) exactly (float32 scale times a small integer)
    x = _data((5, 70), seed=6).double()
    y = intq.fake_quantize(x, bits=bits, block=block, scheme=scheme)
    assert torch.equal(intq.fake_quantize(y, bits=bits, block=block, scheme=scheme), y)


def test_errors():
    with pytest.raises(ValueError, match="NaN or Inf"):
        intq.quantize(torch.tensor([1.0, math.nan]))
    with pytest.raises(ValueError, match="NaN or Inf"):
        intq.fake_quantize(torch.tensor([[1.0, -math.inf]]), bits=4, scheme="affine")
    with pytest.raises(ValueError):
        intq.quantize(torch.ones(4), bits=3)
    with pytest.raises(ValueError):
        intq.quantize(torch.ones(4), scheme="asymmetric")
