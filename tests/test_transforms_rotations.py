"""RotateAttention's Q/K rotations, their fold into the RoPE tables, and the V-Hadamard weight fold.

Expected values are hand derivations (H2 = [[1, 1], [1, −1]]/√2, the pairings the paper defines)
or exact identities checked in float64, never outputs of the code under test."""

import math

import pytest
import torch

from lowbit_video.diagnostics.synthetic import apply_rope_3d, grid_positions
from lowbit_video.errors import ShapeError
from lowbit_video.transforms import fold_v_rotation, half_rotation, interleaved_rotation, qk_rotation, rope_segments
from lowbit_video.transforms.hadamard import hadamard_matrix
from lowbit_video.transforms.rope import apply_folded_rope, apply_rope, fold_pair_rotation, rope_angles

R2 = 1 / math.sqrt(2)
KINDS = ["none", "interleaved", "half", "hadamard"]


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def random_orthogonal(n, seed=0):
    q, r = torch.linalg.qr(randn(n, n, seed=seed))
    return q * torch.sign(torch.diagonal(r))  # Haar; not symmetric, so transposition bugs show


# ------------------------------------------------------------------------------------ Q/K rotations


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d, segments", [(128, None), (8, (4, 2, 2)), (64, (16, 24, 24)), (96, None)])
def test_every_rotation_is_orthogonal_and_keeps_scores(kind, d, segments):
    rot = qk_rotation(kind, d, segments)
    m = rot.matrix()
    assert torch.allclose(m @ m.T, torch.eye(d, dtype=torch.float64), rtol=0, atol=1e-15)
    q, k = randn(2, 3, 17, d, seed=1), randn(2, 3, 9, d, seed=2)
    assert torch.allclose(rot.apply(q), q @ m, rtol=0, atol=1e-15)
    assert torch.allclose(rot.apply(q) @ rot.apply(k).mT, q @ k.mT, rtol=0, atol=1e-12)


def test_interleaved_d8_by_hand():
    # Normalized H2 on (x0, x1), (x2, x3), ...: [x_2i + x_2i+1, x_2i − x_2i+1] / √2.
    x = torch.arange(1.0, 9.0, dtype=torch.float64)
    expected = torch.tensor([3, -1, 7, -1, 11, -1, 15, -1], dtype=torch.float64) * R2
    assert torch.allclose(interleaved_rotation(8).apply(x), expected, rtol=0, atol=1e-15)
    m = torch.zeros(8, 8, dtype=torch.float64)
    for i in range(4):
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64) * R2
    assert torch.equal(interleaved_rotation(8).matrix(), m)


def test_half_d8_segments_422_by_hand():
    # Segment t = channels 0..3 pairs (0, 2), (1, 3); h = (4, 5); w = (6, 7) (D_j/2 = 1 there), each
    # pair written as [a + b, a − b] / √2 to adjacent outputs. x = 1..8 gives
    # [1+3, 1−3, 2+4, 2−4, 5+6, 5−6, 7+8, 7−8] / √2.
    x = torch.arange(1.0, 9.0, dtype=torch.float64)
    expected = torch.tensor([4, -2, 6, -2, 11, -1, 15, -1], dtype=torch.float64) * R2
    rot = half_rotation(8, (4, 2, 2))
    assert torch.allclose(rot.apply(x), expected, rtol=0, atol=1e-15)
    m = torch.zeros(8, 8, dtype=torch.float64)  # x' = x M: column j holds output channel j
    for out, (a, b) in enumerate([(0, 2), (1, 3), (4, 5), (6, 7)]):
        m[a, 2 * out], m[b, 2 * out] = R2, R2
        m[a, 2 * out + 1], m[b, 2 * out + 1] = R2, -R2
    assert torch.equal(rot.matrix(), m)


def test_half_pairs_for_wan_head_dim_128():
    # Wan t/h/w = 44/42/42: t pairs i with i + 22, h (from 44) with i + 21, w (from 86) with i + 21.
    rot = half_rotation(128)
    pairs = list(zip(rot.first.tolist(), rot.second.tolist()))
    assert pairs[0] == (0, 22) and pairs[21] == (21, 43)
    assert pairs[22] == (44, 65) and pairs[42] == (64, 85)
    assert pairs[43] == (86, 107) and pairs[63] == (106, 127)
    m = rot.matrix()
    for lo, hi in [(0, 44), (44, 86), (86, 128)]:  # never leaves its segment
        assert torch.count_nonzero(m[lo:hi, :lo]) == 0 and torch.count_nonzero(m[lo:hi, hi:]) == 0


def test_half_rotation_halves_a_single_outlier_pair_energy():
    # An outlier of 8 in channel 5 (segment t, paired with 27): after H2 it is 8/√2 in two channels.
    x = torch.zeros(128, dtype=torch.float64)
    x[5] = 8.0
    y = half_rotation(128).apply(x)
    assert torch.allclose(y.abs().sort().values[-2:], torch.full((2,), 8 * R2, dtype=torch.float64))
    assert torch.count_nonzero(y) == 2


def test_segment_split_errors_are_user_errors():
    with pytest.raises(ShapeError, match="add up to 126"):
        half_rotation(128, (44, 42, 40))
    with pytest.raises(ShapeError, match="even"):
        half_rotation(8, (3, 3, 2))
    with pytest.raises(ShapeError, match="even head_dim"):
        interleaved_rotation(7)


# ---------------------------------------------------------------------------------------- 3D RoPE


def test_wan_rope_segments():
    # Wan: c = D/2 complex frequencies split [c − 2(c//3), c//3, c//3].
    assert rope_segments(128) == (44, 42, 42)
    assert rope_segments(64) == (24, 20, 20)


def test_table_rope_matches_the_synthetic_3d_rope():
    x = randn(1, 2, 300, 128, seed=3)
    pos = grid_positions(300)
    assert torch.equal(apply_rope(x, rope_angles(pos, rope_segments(128))), apply_rope_3d(x, pos))


def test_interleaved_rotation_after_rope_equals_rope_with_folded_tables():
    x = randn(2, 3, 600, 128, seed=4)
    angles = rope_angles(grid_positions(600), rope_segments(128))
    rot = interleaved_rotation(128)
    rotated_after_rope = rot.apply(apply_rope(x, angles))
    folded = apply_folded_rope(x, fold_pair_rotation(angles, rot.blocks))
    assert torch.allclose(folded, rotated_after_rope, rtol=0, atol=1e-14)


def test_folded_h2_tables_by_hand():
    # Row-vector RoPE block [[c, s], [−s, c]] times H2: [[c+s, c−s], [c−s, −(c+s)]] / √2.
    angles = rope_angles(grid_positions(50), (4, 2, 2))
    c, s = angles.cos(), angles.sin()
    t = fold_pair_rotation(angles, interleaved_rotation(8).blocks)
    expected = torch.stack((torch.stack((c + s, c - s), -1), torch.stack((c - s, -(c + s)), -1)), -2) * R2
    assert torch.allclose(t, expected, rtol=0, atol=1e-15)


def test_fold_holds_for_any_orthogonal_2x2_blocks():
    # Learned O(2) blocks (the paper's orthogonal ablation): rotations and reflections alike.
    n = 64
    phi = randn(n, seed=5)
    c, s = phi.cos(), phi.sin()
    refl = torch.arange(n) % 2 == 1
    blocks = torch.stack((torch.stack((c, s), -1), torch.stack((-s, c), -1)), -2)
    blocks[refl, 1] = -blocks[refl, 1]  # det −1 for odd pairs
    x = randn(1, 1, 256, 2 * n, seed=6)
    angles = rope_angles(grid_positions(256), rope_segments(128))
    rot = interleaved_rotation(128, blocks)
    assert torch.allclose(apply_folded_rope(x, fold_pair_rotation(angles, blocks)), rot.apply(apply_rope(x, angles)), rtol=0, atol=1e-14)


# ------------------------------------------------------------------------------- V-Hadamard fold


def attention_block(x, wq, wk, wv, bv, wo, bo, heads, kv_heads, d):
    """q/k/v projections (torch Linear layout), per-head softmax attention, output projection."""
    n = x.shape[0]
    q = (x @ wq.T).reshape(n, heads, d).transpose(0, 1)
    k = (x @ wk.T).reshape(n, kv_heads, d).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
    v = (x @ wv.T + bv).reshape(n, kv_heads, d).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
    o = torch.softmax(q @ k.mT / math.sqrt(d), -1) @ v
    return o.transpose(0, 1).reshape(n, heads * d) @ wo.T + bo


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2)])
@pytest.mark.parametrize("which", ["hadamard", "haar"])
def test_v_fold_leaves_the_block_output_unchanged(heads, kv_heads, which):
    d, model, out = 16, 48, 40
    x = randn(70, model, seed=7)
    wq, wk = randn(heads * d, model, seed=8), randn(kv_heads * d, model, seed=9)
    wv, bv = randn(kv_heads * d, model, seed=10), randn(kv_heads * d, seed=11)
    wo, bo = randn(out, heads * d, seed=12), randn(out, seed=13)
    h = hadamard_matrix(d) if which == "hadamard" else random_orthogonal(d, seed=14)
    wv2, wo2, bv2 = fold_v_rotation(wv, wo, d, b_v=bv, rotation=h)
    ref = attention_block(x, wq, wk, wv, bv, wo, bo, heads, kv_heads, d)
    folded = attention_block(x, wq, wk, wv2, bv2, wo2, bo, heads, kv_heads, d)
    assert torch.allclose(folded, ref, rtol=0, atol=1e-12)
    # The folded value projection yields V·H per head (what gets quantized).
    v = (x @ wv.T + bv).reshape(70, kv_heads, d)
    assert torch.allclose((x @ wv2.T + bv2).reshape(70, kv_heads, d), v @ h, rtol=0, atol=1e-12)


def test_v_fold_rejects_mismatched_head_dim():
    with pytest.raises(ShapeError):
        fold_v_rotation(randn(48, 32), randn(16, 48), 20)
