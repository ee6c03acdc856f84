"""E4M3 rounding (against an enumeration of all bit patterns) and the FP8 E4M3 block format."""

import math

import numpy as np
import pytest
import torch

from lowbit_video.formats import e4m3, fp8

# --- independent reference: enumerate the 128 non-negative E4M3FN bit patterns (numerics.md §1, OFP8) ---------
_BITS = np.arange(127)  # 0x00..0x7E; 0x7F is NaN in E4M3FN (no Inf)
_E, _M = _BITS >> 3, _BITS & 7
E4M3_VALUES = np.where(_E == 0, _M / 8 * 2.0**-6, (1 + _M / 8) * 2.0 ** (_E - 7))


def ref_round_e4m3(x):
    """Nearest E4M3 value, ties to the even bit pattern (even mantissa), |x| saturated at 448.

    The distances to the two nearest candidates are exact in float64 (Sterbenz), so ties are detected exactly.
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), 448.0)
    d = np.abs(a[:, None] - E4M3_VALUES[None, :])
    near = d == d.min(axis=1, keepdims=True)
    pick = np.argmax(2 * near + (near & (_BITS % 2 == 0)[None, :]), axis=1)
    return np.copysign(E4M3_VALUES[pick], x)


def test_reference_table_sanity():
    assert E4M3_VALUES.max() == 448.0 and E4M3_VALUES[1] == 2.0**-9 and E4M3_VALUES[8] == 2.0**-6
    assert np.all(np.diff(E4M3_VALUES) > 0)


def test_decode_matches_enumeration():
    pos = e4m3.decode(torch.arange(127, dtype=torch.uint8)).double().numpy()
    neg = e4m3.decode(torch.arange(128, 255, dtype=torch.uint8)).double().numpy()
    np.testing.assert_array_equal(pos, E4M3_VALUES)
    np.testing.assert_array_equal(neg, -E4M3_VALUES)
    assert torch.equal(e4m3.encode(torch.from_numpy(E4M3_VALUES)), torch.arange(127, dtype=torch.uint8))
    assert e4m3.encode(torch.tensor([448.0, -448.0])).tolist() == [0x7E, 0xFE]  # 1.75 * 2**8: exp 1111, mant 110
    with pytest.raises(ValueError):
        e4m3.encode(torch.tensor([1.0625]))


def test_dense_random_and_all_midpoints_match_reference():
    rng = np.random.default_rng(1)
    mag = np.exp2(rng.uniform(-12, 10, 20000))
    rand = mag * rng.choice([-1.0, 1.0], mag.size)
    mids = (E4M3_VALUES[:-1] + E4M3_VALUES[1:]) / 2  # every tie, incl. 2**-10 between 0 and the min subnormal
    # 1 float64 ulp around each tie: a float64 -> float32 -> E4M3 double rounding would get these wrong
    around = np.concatenate([np.nextafter(mids, 0), np.nextafter(mids, 1e3)])
    x = np.concatenate([rand, mids, -mids, around, -around, E4M3_VALUES, -E4M3_VALUES])
    got = e4m3.round_to_e4m3(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, ref_round_e4m3(x))
    got32 = e4m3.round_to_e4m3(torch.from_numpy(x.astype(np.float32))).numpy()
    np.testing.assert_array_equal(got32, ref_round_e4m3(x.astype(np.float32)))


def test_ties_by_hand():
    x = torch.tensor([1.0625, 1.1875, 2.0**-10, 3 * 2.0**-10, 240.0, 464.0], dtype=torch.float64)
    # 1.0625 between 1 (mant 000) and 1.125 (001) -> 1; 1.1875 between 1.125 and 1.25 (010) -> 1.25;
    # 2**-10 between 0 and 2**-9 -> 0; 3 * 2**-10 between 2**-9 (mant 001) and 2**-8 (010) -> 2**-8;
    # 240 is exact (1.875 * 2**7); 464 is the midpoint to the nonexistent 480 -> saturates to 448.
    assert e4m3.round_to_e4m3(x).tolist() == [1.0, 1.25, 0.0, 2.0**-8, 240.0, 448.0]


def test_saturation():
    x = torch.tensor([448.0, 449.0, 500.0, 1e6, 1e30, math.inf, -500.0, -math.inf])
    assert e4m3.round_to_e4m3(x).tolist() == [448.0] * 6 + [-448.0] * 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_preserved(dtype):
    x = (torch.randn(2000, generator=torch.Generator().manual_seed(2)) * 50).to(dtype)
    y = e4m3.round_to_e4m3(x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.double().numpy(), ref_round_e4m3(x.double().numpy()))


# --- FP8 format ----------------------------------------------------------------------------------------------


def ref_fp8(x, scale32):
    """Numpy reference for one block: codes = RNE_E4M3(x / s), value = code * s (float32 scale s), as float32."""
    s = np.float64(scale32)
    return (ref_round_e4m3(np.asarray(x, np.float64) / s) * s).astype(np.float32)


def test_fp8_hand_example():
    # amax 56 -> scale 56 / 448 = 0.125 (exact); 56 -> 448; 1.0 -> 8; 0.3 -> 2.4, E4M3 spacing 0.25 on [2, 4)
    # -> 2.5, dequantized 0.3125; -0.01 -> -0.08 = -1.28 * 2**-4, mantissa 1.25 nearer than 1.375 -> -0.078125,
    # dequantized -0.009765625.
    x = torch.tensor([[56.0, 1.0, 0.3, -0.01]])
    t = fp8.quantize(x)
    assert t.scales.tolist() == [[0.125]]
    assert t.codes.float().tolist() == [[[448.0, 8.0, 2.5, -0.078125]]]
    assert t.dequantize().tolist() == [[56.0, 1.0, 0.3125, -0.009765625]]


@pytest.mark.parametrize(
    "shape,axis,block", [((4, 50), -1, None), ((3, 47), -1, 16), ((47, 3), 0, 16), ((2, 33, 5), -2, 8)]
)
def test_fp8_matches_reference_and_scales_are_amax_over_448(shape, axis, block):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-8, 8, shape, generator=g).float())
    t = fp8.quantize(x, block=block, axis=axis)
    xm = x.movedim(axis, -1).double().numpy()
    n = xm.shape[-1]
    step = n if block is None else block
    deq = t.dequantize().movedim(axis, -1).numpy()
    for k, start in enumerate(range(0, n, step)):
        chunk = xm[..., start : start + step]  # the real elements only: padding must not matter
        s32 = (np.abs(chunk).max(axis=-1) / 448.0).astype(np.float32)
        np.testing.assert_array_equal(t.scales[..., k].numpy(), s32)
        for idx in np.ndindex(chunk.shape[:-1]):
            np.testing.assert_array_equal(deq[idx][start : start + step], ref_fp8(chunk[idx], s32[idx]))
    assert t.codes.dtype == torch.float8_e4m3fn and t.dequantize().shape == x.shape


def test_fp8_static_scale_for_softmax_tiles():
    p = torch.rand(4, 64, generator=torch.Generator().manual_seed(4))
    p[0, 0] = 1.0
    t = fp8.quantize(p, scale=1 / 448)
    s32 = np.float32(1 / 448)
    assert torch.all(t.scales == torch.tensor(s32))
    np.testing.assert_array_equal(t.dequantize().numpy(), ref_fp8(p.numpy().ravel(), s32).reshape(4, 64))
    assert t.codes.float()[0, 0, 0].item() == 448.0  # 1 / fl32(1/448) is within 1 ulp of 448 -> 448
    with pytest.raises(ValueError):
        fp8.quantize(p, scale=0.0)


def test_fp8_all_zero_rows():
    x = torch.zeros(2, 10)
    x[1] = torch.linspace(-1, 1, 10)
    t = fp8.quantize(x)
    assert t.scales[0].tolist() == [1.0] and torch.all(t.codes[0].float() == 0)
    assert torch.equal(t.dequantize()[0], torch.zeros(10))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_fp8_dtype_shape_and_pack_round_trip(dtype):
    x = torch.randn(3, 5, 37, generator=torch.Generator().manual_seed(5)).to(dtype)
    t = fp8.quantize(x, block=16, axis=-1)
    y = t.dequantize()
    assert y.dtype == dtype and y.shape == x.shape
    assert fp8.fake_quantize(x, block=16).dtype == dtype
    p = t.pack()
    assert p.data.dtype == torch.uint8 and p.data.shape == (3, 5, 3, 16)
    u = fp8.unpack(p)
    assert torch.equal(u.codes.view(torch.uint8), t.codes.view(torch.uint8)) and torch.equal(u.scales, t.scales)
    assert torch.equal(u.dequantize(), y)


@pytest.mark.parametrize("block", [None, 16])
def test_fp8_fake_quantize_idempotent(block):
    # float64: code * float32 scale is exact there, so the second pass sees the grid itself
    x = torch.randn(6, 70, dtype=torch.float64, generator=torch.Generator().manual_seed(6)) * 3
    y = fp8.fake_quantize(x, block=block)
    assert torch.equal(fp8.fake_quantize(y, block=block), y)


def test_fp8_rejects_non_finite_and_unknown_format():
    with pytest.raises(ValueError, match="NaN or Inf"):
        fp8.quantize(torch.tensor([1.0, math.nan]))
    with pytest.raises(ValueError, match="NaN or Inf"):
        fp8.fake_quantize(torch.tensor([1.0, math.inf]))
    with pytest.raises(ValueError):
        fp8.quantize(torch.ones(4), fmt="e5m2")
