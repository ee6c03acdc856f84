"""Operand granularities of the quantizer builder against hand-worked values and a direct per-group formula."""

import pytest
import torch

from lowbit_video.attention.quantizers import build_quantizer
from lowbit_video.errors import RecipeError
from lowbit_video.recipes import OperandQuant, recipe_from_dict


def _k_per_thread(group=8):
    return OperandQuant(format="int8", granularity="per_thread", group=group)


def test_per_thread_groups_pairs_of_every_eight_keys_by_hand():
    # one block of 8 keys: keys {0, 1}, {2, 3}, {4, 5}, {6, 7} each share a scale (amax / 127)
    k = torch.zeros(1, 1, 8, 2, dtype=torch.float64)
    k[0, 0, 0] = torch.tensor([127.0, 1.0])   # group 0's maximum: scale 1
    k[0, 0, 1] = torch.tensor([63.5, -2.0])   # on scale 1, 63.5 rounds to 64 (half to even)
    k[0, 0, 2] = torch.tensor([0.9921875, 0.25])  # group 1: amax 127·2^-7, scale 2^-7: codes 127, 32
    k[0, 0, 3] = torch.tensor([-0.5, 0.005])      # -64; 0.005 / 2^-7 = 0.64 rounds to 1: 2^-7
    # group 2 (keys 4, 5) all zero: scale 1, zeros stay zero; group 3 (keys 6, 7): amax 254, scale 2
    k[0, 0, 6] = torch.tensor([254.0, 3.0])   # 3 / 2 = 1.5 rounds to 2: value 4
    k[0, 0, 7] = torch.tensor([-5.0, 1.0])    # -2.5 -> -2: -4; 0.5 -> 0: 0
    out = build_quantizer("k", _k_per_thread())(k)
    want = torch.tensor([[127, 1], [64, -2], [0.9921875, 0.25], [-0.5, 0.0078125], [0, 0], [0, 0], [254, 4], [-4, 0]],
                        dtype=torch.float64)
    torch.testing.assert_close(out[0, 0], want, rtol=0, atol=0)
    # per token, key 1 has its own scale 63.5 / 127 and is exact
    per_token = build_quantizer("k", OperandQuant(format="int8", granularity="per_token"))(k)
    assert per_token[0, 0, 1, 0].item() == 63.5


def _per_group_formula(x, block):
    """The same grouping written out: for each block and each t = (n mod 8) div 2, scale = fp32(amax / 127),
    values RNE(x / scale)·scale."""
    out = torch.empty_like(x)
    n = x.shape[-2]
    for start in range(0, n, block):
        for t in range(4):
            idx = [i for i in range(start, min(start + block, n)) if (i % 8) // 2 == t]
            if not idx:
                continue
            g = x[..., idx, :]
            amax = g.abs().amax(dim=(-2, -1), keepdim=True)
            s = (amax / 127).to(torch.float32).to(torch.float64)
            s = torch.where(s > 0, s, torch.ones_like(s))
            out[..., idx, :] = torch.round(g / s).clamp(-127, 127) * s
    return out


@pytest.mark.parametrize("n", [128, 300, 5])
def test_per_thread_matches_the_group_formula_with_a_short_last_block(n):
    g = torch.Generator().manual_seed(3)
    # keys whose magnitudes differ by token, so that per-token and per-group scales differ
    x = torch.randn(2, 3, n, 16, generator=g, dtype=torch.float64) * torch.exp(torch.randn(2, 3, n, 1, generator=g))
    got = build_quantizer("k", _k_per_thread(128))(x)
    torch.testing.assert_close(got, _per_group_formula(x, 128), rtol=0, atol=0)
    fast = build_quantizer("k", _k_per_thread(128), fast=True)(x)
    torch.testing.assert_close(fast, got, rtol=0, atol=0)  # the CPU path's kernels: bit-identical on float64
    if n > 8:
        per_token = build_quantizer("k", OperandQuant(format="int8", granularity="per_token"))(x)
        assert not torch.equal(per_token, got)


def test_per_thread_group_must_be_a_multiple_of_eight():
    raw = {"name": "t", "attention": {"kind": "quantized", "k": {"format": "int8", "granularity": "per_thread",
                                                                 "group": 12}}}
    with pytest.raises(RecipeError, match="multiple of 8"):
        recipe_from_dict(raw)


def test_per_thread_is_for_keys_only():
    raw = {"name": "t", "attention": {"kind": "quantized", "q": {"format": "int8", "granularity": "per_thread"}}}
    with pytest.raises(RecipeError, match="granularity"):
        recipe_from_dict(raw)
