"""transforms/smoothing.py: K and Q mean smoothing leave attention unchanged."""

import torch

from lowbit_video.transforms import smooth_k, smooth_q


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
