"""transforms/hadamard.py: the Hadamard matrix against scipy, and rotation by it."""

import pytest
import scipy.linalg
import torch

from lowbit_video.transforms import hadamard_matrix, rotate


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
