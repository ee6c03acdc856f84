"""MXFP4: shared-exponent rules (exact), hand examples, reference comparison, layout, packing, idempotence.

References here: exponents from exact rational arithmetic (fractions.Fraction), E2M1 rounding from the branch
form of numerics.md §3.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from lowbit_video.formats import mxfp4

RULES = ["ocp", "tfs", "uos"]


def ref_e2m1(v):
    """numerics.md §3 branch form (RNE, saturating at ±6)."""
    a = np.abs(v)
    r = np.select([a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5], [0, 0.5, 1, 1.5, 2, 3, 4], 6.0)
    return np.copysign(r, v)


def ref_exponent(m, rule, q=7.25):
    """Exact exponent with rational arithmetic. ocp: floor(log2 m) - 2; tfs / uos: smallest e with m <= c * 2**e."""
    if m == 0:
        return 0
    f = Fraction(float(m))
    two = Fraction(2)
    if rule == "ocp":
        e = math.floor(math.log2(m))  # a starting guess only; the loops make it exact
        while two**e > f:
            e -= 1
        while two ** (e + 1) <= f:
            e += 1
        e -= 2
    else:
        c = Fraction(6.0 if rule == "tfs" else q)
        e = math.ceil(math.log2(m / float(c)))
        while f > c * two**e:
            e += 1
        while f <= c * two ** (e - 1):
            e -= 1
    return max(-127, min(127, e))


def ref_dequantize_block(xb, rule, q=7.25):
    e = ref_exponent(np.abs(xb).max(), rule, q)
    return np.ldexp(ref_e2m1(np.ldexp(xb, -e)), e)  # ldexp is exact here


def shared_exp(m, rule, q=7.25):
    return mxfp4.shared_exponent(torch.as_tensor(m), rule=rule, q=q).to(torch.int64).numpy()


# --- shared exponent ------------------------------------------------------------------------------------------

RANGES = {  # normalized block maximum M / 2**e (numerics.md §4)
    "ocp": (lambda x: (x >= 4) & (x < 8)),
    "tfs": (lambda x: (x > 3) & (x <= 6)),
    "uos": (lambda x: (x > 3.625) & (x <= 7.25)),
}


@pytest.mark.parametrize("rule", RULES)
def test_normalized_max_range_log_uniform(rule):
    rng = np.random.default_rng(10)
    m64 = np.exp2(rng.uniform(-120, 120, 100_000))  # float64, 240 binades
    m32 = np.exp2(rng.uniform(-100, 100, 100_000)).astype(np.float32)
    for m in (m64, m32):
        e = shared_exp(m, rule)
        x_max = np.ldexp(m.astype(np.float64), -e)  # exact
        assert RANGES[rule](x_max).all(), (x_max.min(), x_max.max())
    # and the exponents equal the rational reference on a subset
    sub = np.concatenate([m64[:500], m32[:500].astype(np.float64)])
    assert shared_exp(sub, rule).tolist() == [ref_exponent(v, rule) for v in sub]


K = list(range(-120, 121, 7))


def test_edges_uos():
    m = np.ldexp(7.25, K)
    assert shared_exp(m, "uos").tolist() == K  # M / 2**e = 7.25 exactly: the boundary belongs to (3.625, 7.25]
    assert shared_exp(np.nextafter(m, np.inf), "uos").tolist() == [k + 1 for k in K]
    lo = np.ldexp(3.625, K)
    assert shared_exp(lo, "uos").tolist() == [k - 1 for k in K]  # 3.625 is excluded: it is 7.25 one binade down
    assert shared_exp(np.nextafter(lo, np.inf), "uos").tolist() == K


def test_edges_ocp_float32_log2_pitfall():
    # numerics.md §9.2: float32 floor(log2(7.9999995)) evaluates to 3; the exact floor is 2 -> exponent k, not k + 1.
    below8 = np.ldexp(np.nextafter(np.float32(8), np.float32(0)), K[3:-3]).astype(np.float32)  # exact in float32
    assert shared_exp(below8, "ocp").tolist() == K[3:-3]
    below8_64 = np.ldexp(np.nextafter(8.0, 0.0), K)
    assert shared_exp(below8_64, "ocp").tolist() == K
    assert shared_exp(np.ldexp(8.0, K), "ocp").tolist() == [k + 1 for k in K]
    assert shared_exp(np.ldexp(4.0, K), "ocp").tolist() == K


def test_edges_tfs():
    assert shared_exp(np.ldexp(6.0, K), "tfs").tolist() == K
    assert shared_exp(np.nextafter(np.ldexp(6.0, K), np.inf), "tfs").tolist() == [k + 1 for k in K]
    assert shared_exp(np.ldexp(3.0, K), "tfs").tolist() == [k - 1 for k in K]  # 3 maps to 6 one binade down


def test_uos_with_q6_equals_tfs_and_other_q():
    rng = np.random.default_rng(11)
    m = np.exp2(rng.uniform(-60, 60, 20000))
    assert np.array_equal(shared_exp(m, "uos", q=6.0), shared_exp(m, "tfs"))
    for q in (0.1, 5.3, 7.0, 100.0):
        x_max = np.ldexp(m, -shared_exp(m, "uos", q=q))
        assert np.all((x_max > q / 2) & (x_max <= q)), q


def test_exponent_q_ignored_for_ocp_and_tfs():
    m = np.array([0.3, 7.0, 29.0])
    assert np.array_equal(shared_exp(m, "ocp", q=8.0), shared_exp(m, "ocp"))
    assert np.array_equal(shared_exp(m, "tfs", q=6.0), shared_exp(m, "tfs", q=123.0))


def test_exponent_zero_and_clamp():
    m = np.array([0.0, 2.0**300, 2.0**-300, 2.0**-1074])
    for rule in RULES:
        assert shared_exp(m, rule).tolist() == [0, 127, -127, -127]
    assert mxfp4.shared_exponent(torch.tensor([1.0]), rule="ocp").dtype == torch.int32


def test_exponent_bad_arguments():
    with pytest.raises(ValueError):
        mxfp4.shared_exponent(torch.tensor([1.0]), rule="floor")
    for q in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            mxfp4.shared_exponent(torch.tensor([1.0]), rule="uos", q=q)
    with pytest.raises(ValueError):
        mxfp4.shared_exponent(torch.tensor([-1.0]))


# --- hand-computed examples -------------------------------------------------------------------------------------


def _block(values):
    x = torch.zeros(1, 32)
    x[0, : len(values)] = torch.tensor(values)
    return x


def test_hand_example_m7():
    x = _block([6.5, 1.0, -0.3, 0.8, 2.6, -7.0])  # M = 7
    # ocp: floor(log2 7) - 2 = 0; uos: ceil(log2(7 / 7.25)) = 0. Scale 1:
    #   6.5 -> 6 (in (5, 7)), 1 -> 1, -0.3 -> -0.5 (above the 0.25 tie), 0.8 -> 1, 2.6 -> 3 (above 2.5), -7 -> -6 (sat.)
    for rule in ("ocp", "uos"):
        t = mxfp4.quantize(x, rule=rule)
        assert t.scale_exponents.tolist() == [[0]]
        assert t.dequantize()[0, :6].tolist() == [6.0, 1.0, -0.5, 1.0, 3.0, -6.0]
    # tfs: ceil(log2(7 / 6)) = 1, scale 2: 3.25 -> 3, 0.5, -0.15 -> 0, 0.4 -> 0.5, 1.3 -> 1.5, -3.5 -> -4 (tie to even)
    t = mxfp4.quantize(x, rule="tfs")
    assert t.scale_exponents.tolist() == [[1]]
    assert t.dequantize()[0, :6].tolist() == [6.0, 1.0, 0.0, 1.0, 3.0, -8.0]
    assert t.codes[0, 0, :6].tolist() == [0b0101, 0b0001, 0b0000, 0b0001, 0b0011, 0b1110]
    assert torch.all(t.codes[0, 0, 6:] == 0)


def test_hand_example_m29():
    x = _block([29.0, -10.0, 2.0])
    # uos: 29 / 7.25 = 4 exactly -> e = 2, x_max = 7.25 -> 6 (sat.): 24; -10 / 4 = -2.5 -> -2 (tie): -8; 2 / 4 = 0.5
    t = mxfp4.quantize(x, rule="uos")
    assert t.scale_exponents.tolist() == [[2]] and t.dequantize()[0, :3].tolist() == [24.0, -8.0, 2.0]
    # ocp: floor(log2 29) = 4 -> e = 2: same values
    assert mxfp4.quantize(x, rule="ocp").dequantize()[0, :3].tolist() == [24.0, -8.0, 2.0]
    # tfs: ceil(log2(29 / 6)) = 3: 29 / 8 = 3.625 -> 4: 32; -1.25 -> -1 (tie): -8; 0.25 -> 0 (tie): 0
    t = mxfp4.quantize(x, rule="tfs")
    assert t.scale_exponents.tolist() == [[3]] and t.dequantize()[0, :3].tolist() == [32.0, -8.0, 0.0]


def test_q_changes_only_uos():
    x = _block([7.0, 1.0])
    # q = 6: e = ceil(log2(7 / 6)) = 1 (like tfs); q = 8: e = ceil(log2(7 / 8)) = 0
    assert mxfp4.quantize(x, rule="uos", q=6.0).scale_exponents.item() == 1
    assert mxfp4.quantize(x, rule="uos", q=8.0).scale_exponents.item() == 0
    assert mxfp4.quantize(x, rule="tfs", q=8.0).scale_exponents.item() == 1


# --- against the reference, layout, ragged blocks, dtypes --------------------------------------------------------


def _data(shape, seed):
    g = torch.Generator().manual_seed(seed)
    # widely varying magnitudes so that blocks get different exponents
    return torch.randn(shape, generator=g) * torch.exp2(torch.randint(-20, 20, shape, generator=g).float())


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("shape,axis", [((4, 64), -1), ((3, 47), -1), ((33,), 0), ((47, 3), 0), ((2, 45, 3), -2)])
def test_matches_reference_with_ragged_blocks(rule, shape, axis):
    x = _data(shape, seed=len(shape) + shape[0])
    t = mxfp4.quantize(x, rule=rule, axis=axis)
    xm = x.movedim(axis, -1).double().numpy()
    deq = t.dequantize().movedim(axis, -1).numpy()
    n = xm.shape[-1]
    assert t.codes.shape == xm.shape[:-1] + (-(-n // 32), 32)
    for k, start in enumerate(range(0, n, 32)):
        for idx in np.ndindex(xm.shape[:-1]):
            chunk = xm[idx][start : start + 32]  # real elements only: padding must not change the scale
            assert t.scale_exponents[idx + (k,)].item() == ref_exponent(np.abs(chunk).max(), rule)
            np.testing.assert_array_equal(deq[idx][start : start + 32], ref_dequantize_block(chunk, rule))


def test_padding_codes_are_zero_and_axis0_equals_transpose():
    x = _data((47, 5), seed=1)
    t0 = mxfp4.quantize(x, axis=0)
    t1 = mxfp4.quantize(x.T.contiguous(), axis=-1)
    assert t0.codes.shape == (5, 2, 32) and t0.scale_exponents.shape == (5, 2)
    assert torch.equal(t0.codes, t1.codes) and torch.equal(t0.scale_exponents, t1.scale_exponents)
    assert torch.all(t0.codes[:, 1, 15:] == 0)
    assert torch.equal(t0.dequantize(), t1.dequantize().T)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_and_shape_preserved(dtype):
    x = torch.randn(2, 3, 33, generator=torch.Generator().manual_seed(2)).to(dtype)
    t = mxfp4.quantize(x)
    y = t.dequantize()
    assert y.dtype == dtype and y.shape == x.shape
    assert t.dtype == dtype and t.shape == (2, 3, 33)
    xm = x.double().numpy()
    for idx in np.ndindex(2, 3):
        ref = np.concatenate([ref_dequantize_block(xm[idx][s : s + 32], "uos") for s in (0, 32)])
        np.testing.assert_array_equal(y[idx].double().numpy(), ref)  # grid values are exact in every dtype here
    f = mxfp4.fake_quantize(x, rule="ocp", axis=1)
    assert f.dtype == dtype and f.shape == x.shape


def test_all_zero_block():
    x = torch.zeros(2, 64)
    x[1, 32:] = torch.linspace(-3, 3, 32)
    t = mxfp4.quantize(x)
    assert t.scale_exponents.tolist()[0] == [0, 0] and t.scale_exponents[1, 0].item() == 0
    assert torch.all(t.codes[0] == 0) and torch.all(t.codes[1, 0] == 0)
    assert torch.equal(t.dequantize()[0], torch.zeros(64))
    assert t.pack().scales[0].tolist() == [127, 127]


def test_per_token_block_none():
    x = _data((3, 50), seed=3)
    t = mxfp4.quantize(x, block=None)
    assert t.codes.shape == (3, 1, 50)
    xm = x.double().numpy()
    for r in range(3):
        np.testing.assert_array_equal(t.dequantize()[r].double().numpy(), ref_dequantize_block(xm[r], "uos"))


# --- packing ------------------------------------------------------------------------------------------------------


def test_pack_hand_written_bytes():
    x = _block([0.5, 1.0, -6.0, 3.0, 8.0])  # M = 8: uos e = ceil(log2(8 / 7.25)) = 1
    p = mxfp4.quantize(x).pack()
    # scaled: 0.25 -> 0 (code 0), 0.5 (1), -3 (0b1101), 1.5 (0b0011), 4 (0b0110)
    assert p.scales.tolist() == [[128]]  # E8M0 byte = 1 + 127
    assert p.data.shape == (1, 1, 16) and p.data[0, 0, :3].tolist() == [0x10, 0x3D, 0x06]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize(
    "shape,axis,block", [((3, 47), -1, 32), ((2, 33), -1, None), ((47, 2), 0, 32), ((5, 9), -1, 3)]
)
def test_pack_round_trip(rule, shape, axis, block):
    x = _data(shape, seed=4)
    t = mxfp4.quantize(x, rule=rule, axis=axis, block=block)
    p = t.pack()
    assert p.data.dtype == torch.uint8 and p.scales.dtype == torch.uint8
    for u in (p.unpack(), mxfp4.unpack(p)):
        assert torch.equal(u.codes, t.codes) and torch.equal(u.scale_exponents, t.scale_exponents)
        assert (u.shape, u.axis, u.block, u.dtype, u.rule, u.q) == (t.shape, t.axis, t.block, t.dtype, t.rule, t.q)
        assert torch.equal(u.dequantize(), t.dequantize())


# --- idempotence, errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_fake_quantize_idempotent(rule, dtype):
    x = _data((8, 96), seed=5).to(dtype)
    y = mxfp4.fake_quantize(x, rule=rule)
    assert torch.equal(mxfp4.fake_quantize(y, rule=rule), y)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_rejected(bad):
    x = torch.ones(2, 40)
    x[1, 37] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        mxfp4.quantize(x)
    with pytest.raises(ValueError, match="NaN or Inf"):
        mxfp4.fake_quantize(x, rule="ocp")


@pytest.mark.parametrize("rule, q", [("ocp", 7.25), ("tfs", 7.25), ("uos", 7.25), ("uos", 6.5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_fake_quantize_equals_quantize_then_dequantize_bit_for_bit(rule, q, dtype):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(3, 5, 77, generator=g, dtype=torch.float64) * torch.exp(3 * torch.randn(3, 5, 1, generator=g, dtype=torch.float64))).to(dtype)
    x[0, 0, :40] = 0  # an all-zero block
    for axis in (-1, 1):
        fast = mxfp4.fake_quantize(x, rule=rule, q=q, axis=axis)
        slow = mxfp4.quantize(x, rule=rule, q=q, axis=axis).dequantize()
        assert fast.dtype == slow.dtype == dtype
        assert torch.equal(fast, slow)
