"""NVFP4 two-level scaling: E4M3 block scales, FP32 outer scale, E2M1 elements.

References here: E4M3 rounding by enumerating all bit patterns, E2M1 by the branch form of numerics.md §3.
"""

import math

import numpy as np
import pytest
import torch

from lowbit_video.formats import nvfp4

_BITS = np.arange(127)  # non-negative E4M3FN patterns 0x00..0x7E (0x7F is NaN)
_E, _M = _BITS >> 3, _BITS & 7
E4M3_VALUES = np.where(_E == 0, _M / 8 * 2.0**-6, (1 + _M / 8) * 2.0 ** (_E - 7))


def ref_e4m3(x):
    """Nearest E4M3 value, ties to the even bit pattern, saturating at 448 (non-negative inputs)."""
    a = np.minimum(np.asarray(x, np.float64), 448.0).ravel()
    d = np.abs(a[:, None] - E4M3_VALUES[None, :])
    near = d == d.min(axis=1, keepdims=True)
    pick = np.argmax(2 * near + (near & (_BITS % 2 == 0)[None, :]), axis=1)
    return E4M3_VALUES[pick].reshape(np.shape(x))


def ref_e2m1(v):
    a = np.abs(v)
    r = np.select([a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5], [0, 0.5, 1, 1.5, 2, 3, 4], 6.0)
    return np.copysign(r, v)


def ref_nvfp4_rows(xm, block, s_o):
    """Dequantized reference for rows ``xm`` (..., n), blocks along the last axis, outer scale ``s_o`` (..., 1)."""
    out = np.zeros_like(xm)
    scales = []
    for start in range(0, xm.shape[-1], block):
        chunk = xm[..., start : start + block]
        s_b = ref_e4m3(np.abs(chunk).max(axis=-1, keepdims=True) / (6.0 * s_o))
        step = s_b * s_o
        safe = np.where(step > 0, step, 1.0)
        out[..., start : start + block] = np.where(step > 0, ref_e2m1(chunk / safe) * step, 0.0)
        scales.append(s_b[..., 0])
    return out, np.stack(scales, axis=-1)


def tensor_scale(x):
    s = np.float32(np.abs(x).max() / 2688.0)
    return np.float64(s if s > 0 else 1.0)


def _data(shape, seed, spread=12):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * torch.exp2(torch.randint(-spread, 1, shape, generator=g).float())


def test_hand_example_outer_none():
    x = torch.zeros(1, 16)
    x[0, :2] = torch.tensor([0.3, 1.0])
    t = nvfp4.quantize(x, outer_scale="none")
    # amax 1: 1/6 = 1.333 * 2**-3 -> E4M3 mantissa 1.375 (nearer than 1.25): s_b = 0.171875
    # 1 / 0.171875 = 5.82 -> 6 -> 1.03125; 0.3 / 0.171875 = 1.745 -> 1.5 -> 0.2578125
    assert t.block_scales.tolist() == [[0.171875]] and t.outer_scale.item() == 1.0
    assert t.dequantize()[0, :3].tolist() == [0.2578125, 1.03125, 0.0]
    assert t.codes[0, 0, :2].tolist() == [0b0011, 0b0111]


def test_tensor_scale_and_top_block_scale_448():
    x = _data((4, 64), seed=1)
    x[2, 37] = -5.0  # the tensor amax
    t = nvfp4.quantize(x)
    s_o = np.float32(5.0 / (448 * 6))
    assert t.outer_scale.dtype == torch.float32 and t.outer_scale.item() == s_o
    assert t.block_scales[2, 2].item() == 448.0  # amax / 6 / s_o = 448 (up to float32 rounding of s_o)
    assert t.dequantize()[2, 37].item() == np.float32(-6 * 448 * np.float64(s_o))
    # every block scale is an exact E4M3 value
    assert np.isin(t.block_scales.double().numpy(), E4M3_VALUES).all()


@pytest.mark.parametrize("outer", ["tensor", "none"])
@pytest.mark.parametrize("shape,axis", [((4, 64), -1), ((3, 47), -1), ((47, 3), 0), ((2, 37, 3), -2)])
def test_matches_reference(outer, shape, axis):
    x = _data(shape, seed=shape[0] + len(shape), spread=16 if outer == "tensor" else 4)
    t = nvfp4.quantize(x, outer_scale=outer, axis=axis)
    xm = x.movedim(axis, -1).double().numpy()
    s_o = tensor_scale(xm) if outer == "tensor" else 1.0
    ref, ref_scales = ref_nvfp4_rows(xm, 16, np.full(xm.shape[:-1] + (1,), s_o))
    np.testing.assert_array_equal(t.block_scales.double().numpy(), ref_scales)
    np.testing.assert_array_equal(t.dequantize().movedim(axis, -1).numpy(), ref.astype(np.float32))


def test_per_row_outer_scale_sageattention3():
    p = torch.rand(6, 80, generator=torch.Generator().manual_seed(2)) ** 4  # softmax-tile-like, per-row ranges
    p[3] *= 1e-3
    rowmax = p.abs().amax(dim=-1, keepdim=True)
    s_o = (rowmax.double() / 2688).float()
    t = nvfp4.quantize(p, outer_scale=s_o)
    assert torch.equal(t.outer_scale, s_o)
    assert torch.all(t.block_scales.amax(dim=-1) == 448.0)  # each row's top block uses the top of E4M3
    ref, ref_scales = ref_nvfp4_rows(p.double().numpy(), 16, s_o.double().numpy())
    np.testing.assert_array_equal(t.block_scales.double().numpy(), ref_scales)
    np.testing.assert_array_equal(t.dequantize().numpy(), ref.astype(np.float32))
    # a 1-d per-row scale along axis 0 (blocks down the columns) broadcasts the same way
    t0 = nvfp4.quantize(p.T.contiguous(), axis=0, outer_scale=s_o.T)
    assert torch.equal(t0.dequantize(), t.dequantize().T)


def test_outer_scale_validation():
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError):
        nvfp4.quantize(x, outer_scale=torch.ones(4, 32))  # must be size 1 along the block axis
    with pytest.raises(ValueError):
        nvfp4.quantize(x, outer_scale=torch.ones(3, 1))  # does not broadcast to x
    with pytest.raises(ValueError):
        nvfp4.quantize(x, outer_scale=torch.zeros(4, 1))
    with pytest.raises(ValueError):
        nvfp4.quantize(x, outer_scale="row")


def test_zero_tensor_and_zero_block_scale():
    t = nvfp4.quantize(torch.zeros(2, 20))
    assert t.outer_scale.item() == 1.0 and torch.all(t.block_scales == 0) and torch.all(t.codes == 0)
    assert torch.equal(t.dequantize(), torch.zeros(2, 20))
    # block amax / 6 below 2**-10 (half the smallest E4M3 subnormal) -> block scale 0 -> all-zero codes
    x = torch.zeros(1, 32)
    x[0, 0] = 1.0
    x[0, 16:] = 5e-4
    t = nvfp4.quantize(x, outer_scale="none")
    assert t.block_scales[0, 1].item() == 0.0 and torch.all(t.codes[0, 1] == 0)
    assert torch.all(t.dequantize()[0, 16:] == 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_shape_and_pack_round_trip(dtype):
    x = torch.randn(3, 2, 41, generator=torch.Generator().manual_seed(3)).to(dtype)
    t = nvfp4.quantize(x)
    y = t.dequantize()
    assert y.dtype == dtype and y.shape == x.shape
    assert nvfp4.fake_quantize(x, axis=0).dtype == dtype
    p = t.pack()
    assert p.data.dtype == torch.uint8 and p.data.shape == (3, 2, 3, 8)
    assert p.scales.dtype == torch.uint8 and p.scales.shape == (3, 2, 3)
    for u in (p.unpack(), nvfp4.unpack(p)):
        assert torch.equal(u.codes, t.codes) and torch.equal(u.block_scales, t.block_scales)
        assert torch.equal(u.outer_scale, t.outer_scale)
        assert torch.equal(u.dequantize(), y)


def test_pack_bytes_by_hand():
    x = torch.zeros(1, 16)
    x[0, :3] = torch.tensor([-6.0, 1.0, 3.0])  # outer "none": s_b = E4M3(6 / 6) = 1 -> codes 0b1111, 0b0010, 0b0101
    p = nvfp4.quantize(x, outer_scale="none").pack()
    assert p.scales.tolist() == [[0x38]]  # 1.0 = exponent field 7, mantissa 0
    assert p.data[0, 0, :2].tolist() == [0x2F, 0x05]
    x[0, 0] = 2688.0  # s_b = 448 -> 0x7E
    assert nvfp4.quantize(x, outer_scale="none").pack().scales.tolist() == [[0x7E]]


def test_ragged_and_odd_block_pack_round_trip():
    x = _data((5, 23), seed=4)
    t = nvfp4.quantize(x, block=7)
    u = t.pack().unpack()
    assert torch.equal(u.codes, t.codes) and torch.equal(u.dequantize(), t.dequantize())
    assert t.codes.shape == (5, 4, 7) and torch.all(t.codes[:, 3, 2:] == 0)


@pytest.mark.parametrize("outer", ["tensor", "none", "row"])
def test_fake_quantize_idempotent(outer):
    # float64 holds code * s_b * s_o exactly. Block scales here are normal E4M3 values (block maxima within a
    # factor ~100 of the tensor max); see the report for the subnormal-block-scale caveat.
    x = torch.randn(8, 96, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    if outer == "row":
        def outer_of(v):
            return (v.abs().amax(dim=-1, keepdim=True) / 2688).float()
    else:
        def outer_of(v):
            return outer
    y = nvfp4.fake_quantize(x, outer_scale=outer_of(x))
    assert torch.equal(nvfp4.fake_quantize(y, outer_scale=outer_of(y)), y)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_rejected(bad):
    x = torch.ones(2, 20)
    x[0, 3] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        nvfp4.quantize(x)
    with pytest.raises(ValueError, match="NaN or Inf"):
        nvfp4.fake_quantize(x, outer_scale="none")
