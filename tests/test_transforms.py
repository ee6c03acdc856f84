import pytest
import scipy.linalg
import torch

from lowbit_video.transforms import hadamard_matrix, rotate, smooth_k, smooth_q


@pytest.mark.parametrize("n", [1, 2, 32, 64, 128, 256])
def test_power_of_two_hadamard_matches_scipy(n):
    expected = torch.from_numpy(scipy.linalg.hadamard(n).astype("float64")) / n**0.5
    assert torch.equal(hadamard_matrix(n), expected)


@pytest.mark.parametrize("n", [32, 96, 128, 44, 42, 80])
def test_hadamard_is_orthogonal(n):
    h = hadamard_matrix(n)
    assert torch.allclose(h @ h.T, torch.eye(n, dtype=torch.float64), atol=1e-14)


def test_non_power_of_two_is_block_diagonal_of_largest_power_of_two():
    h = hadamard_matrix(96)
    assert torch.equal(h[:32, :32], hadamard_matrix(32))
    assert torch.count_nonzero(h[:32, 32:]) == 0


def test_rotation_preserves_qk_scores():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 17, 128, generator=g, dtype=torch.float64), torch.randn(2, 3, 9, 128, generator=g, dtype=torch.float64)
    s = q @ k.transpose(-1, -2)
    s_rot = rotate(q) @ rotate(k).transpose(-1, -2)
    assert torch.allclose(s, s_rot, rtol=0, atol=1e-12)


def test_rotation_spreads_a_channel_outlier():
    x = torch.zeros(1, 64, dtype=torch.float64)
    x[0, 5] = 8.0
    y = rotate(x)
    assert torch.allclose(y.abs(), torch.full_like(y, 1.0))  # 8/sqrt(64) in every channel


def test_k_smoothing_leaves_softmax_unchanged():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 10, 32, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 12, 32, generator=g, dtype=torch.float64) + 5.0
    ks, mean = smooth_k(k)
    assert torch.allclose(ks.mean(dim=-2), torch.zeros(1, 2, 32, dtype=torch.float64), atol=1e-14)
    assert torch.allclose(torch.softmax(q @ k.mT, -1), torch.softmax(q @ ks.mT, -1), atol=1e-14)


def test_q_smoothing_is_exact_with_the_full_precision_correction():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 300, 32, generator=g, dtype=torch.float64) + 3.0
    k = torch.randn(1, 2, 40, 32, generator=g, dtype=torch.float64)
    qs, qm = smooth_q(q, 128)  # groups of 128, 128, 44
    assert torch.allclose(qs + qm, q, atol=1e-14)
    assert torch.allclose(qm[..., 0, :], q[..., :128, :].mean(-2))
    assert torch.allclose(qm[..., 299, :], q[..., 256:, :].mean(-2))
    assert torch.allclose(qs @ k.mT + qm @ k.mT, q @ k.mT, atol=1e-12)
