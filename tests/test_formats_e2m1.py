"""E2M1 element rounding, codes and nibble packing; E8M0 scale bytes.

Expected values come from numerics.md §1/§3 and from a brute-force nearest-value reference written here.
"""

import math

import numpy as np
import pytest
import torch

from lowbit_video.formats import e2m1, e8m0

# numerics.md §1: code -> value, bit 3 = sign.
SPEC_CODES = {
    0b0000: 0.0, 0b0001: 0.5, 0b0010: 1.0, 0b0011: 1.5, 0b0100: 2.0, 0b0101: 3.0, 0b0110: 4.0, 0b0111: 6.0,
    0b1001: -0.5, 0b1010: -1.0, 0b1011: -1.5, 0b1100: -2.0, 0b1101: -3.0, 0b1110: -4.0, 0b1111: -6.0,
}
MAGS = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def ref_round_e2m1(x):
    """Brute force: the nearest magnitude; on a tie the one with an even code (mantissa bit 0); beyond 6 -> 6.

    The distances to the two nearest candidates are exact in float64 (Sterbenz), so ties are detected exactly.
    """
    x = np.asarray(x, dtype=np.float64)
    d = np.abs(np.abs(x)[:, None] - MAGS[None, :])
    near = d == d.min(axis=1, keepdims=True)
    even = (np.arange(8) % 2 == 0)[None, :]
    pick = np.argmax(2 * near + (near & even), axis=1)
    return np.copysign(MAGS[pick], x)


def branch_form(x):
    """numerics.md §3 branch form."""
    a = np.abs(x)
    r = np.select([a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5], [0, 0.5, 1, 1.5, 2, 3, 4], 6.0)
    return np.copysign(r, x)


def rnd(values, dtype=torch.float64):
    return e2m1.round_to_e2m1(torch.tensor(values, dtype=dtype)).tolist()


def test_grid_points_are_fixed_both_signs():
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert rnd(grid) == grid
    assert rnd([-g for g in grid]) == [-g for g in grid]


def test_ties_round_to_even():
    # numerics.md §3 table
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    expected = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    assert rnd(ties) == expected
    assert rnd([-t for t in ties]) == [-e for e in expected]


def test_between_and_saturation():
    assert rnd([0.2, 0.3, 0.7, 1.3, 1.7, 2.6, 3.4, 4.9, 5.1, 6.5, 6.99]) == [0, 0.5, 0.5, 1.5, 1.5, 3, 3, 4, 6, 6, 6]
    assert rnd([7.0, 100.0, 1e30, math.inf]) == [6.0] * 4
    assert rnd([-7.0, -100.0, -1e30, -math.inf]) == [-6.0] * 4


def test_dense_grid_matches_brute_force_reference():
    grid = np.arange(-9.0, 9.0, 1 / 256)  # contains every midpoint (multiples of 1/4)
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    around = np.concatenate([np.nextafter(mids, 0), np.nextafter(mids, 10)])  # 1 ulp either side of each tie
    rng = np.random.default_rng(0)
    rand = rng.uniform(-10, 10, 20000)
    x = np.concatenate([grid, around, -around, rand])
    got = e2m1.round_to_e2m1(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, ref_round_e2m1(x))
    np.testing.assert_array_equal(branch_form(x), ref_round_e2m1(x))  # the spec's two forms agree


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_preserved(dtype):
    x = torch.linspace(-8, 8, 513).to(dtype)
    y = e2m1.round_to_e2m1(x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.double().numpy(), ref_round_e2m1(x.double().numpy()))


def test_encode_decode_spec_table():
    codes = torch.tensor(list(SPEC_CODES), dtype=torch.uint8)
    values = torch.tensor(list(SPEC_CODES.values()))
    assert torch.equal(e2m1.decode(codes), values)
    assert torch.equal(e2m1.encode(values), codes)
    assert e2m1.decode(torch.tensor([0b1000], dtype=torch.uint8)).item() == 0.0  # -0
    assert e2m1.encode(torch.tensor([-0.0, 0.0])).tolist() == [0, 0]
    assert e2m1.decode(codes).dtype == torch.float32 and e2m1.encode(values).dtype == torch.uint8


def test_encode_rejects_off_grid_and_decode_rejects_bad_codes():
    with pytest.raises(ValueError):
        e2m1.encode(torch.tensor([2.5]))
    with pytest.raises(ValueError):
        e2m1.encode(torch.tensor([7.0]))
    with pytest.raises(ValueError):
        e2m1.decode(torch.tensor([16], dtype=torch.uint8))


def test_nibble_order_hand_written_bytes():
    codes = torch.tensor([0x1, 0x2, 0xF, 0x7, 0x3], dtype=torch.uint8)
    # element 0 low nibble, element 1 high nibble; odd length padded with a zero nibble
    assert e2m1.pack_nibbles(codes).tolist() == [0x21, 0x7F, 0x03]
    assert e2m1.unpack_nibbles(torch.tensor([0x21, 0x7F, 0x03], dtype=torch.uint8), 5).tolist() == codes.tolist()


@pytest.mark.parametrize("n", [1, 2, 15, 16, 33])
def test_nibble_round_trip(n):
    codes = torch.randint(0, 16, (3, 2, n), dtype=torch.uint8, generator=torch.Generator().manual_seed(n))
    packed = e2m1.pack_nibbles(codes)
    assert packed.shape == (3, 2, (n + 1) // 2) and packed.dtype == torch.uint8
    assert torch.equal(e2m1.unpack_nibbles(packed, n), codes)


def test_unpack_bad_length():
    with pytest.raises(ValueError):
        e2m1.unpack_nibbles(torch.zeros(3, dtype=torch.uint8), 4)


def test_e8m0_bytes():
    e = torch.tensor([-127, -1, 0, 1, 127], dtype=torch.int32)
    b = e8m0.encode(e)
    assert b.dtype == torch.uint8 and b.tolist() == [0, 126, 127, 128, 254]
    assert torch.equal(e8m0.decode(b), e)
    all_bytes = torch.arange(255, dtype=torch.uint8)
    assert torch.equal(e8m0.encode(e8m0.decode(all_bytes)), all_bytes)
    for bad in (-128, 128):
        with pytest.raises(ValueError):
            e8m0.encode(torch.tensor([bad]))
    with pytest.raises(ValueError):
        e8m0.decode(torch.tensor([0xFF], dtype=torch.uint8))


def test_pow2_exact():
    e = torch.arange(-1022, 1024)
    expected = [math.ldexp(1.0, k) for k in range(-1022, 1024)]
    assert e8m0.pow2(e).tolist() == expected
