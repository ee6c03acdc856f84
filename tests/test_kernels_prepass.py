"""The operand pre-passes (kernels/prepass.py) against lowbit_video.formats applied to the reference engine's own
operands: MXFP4 fold, sage2 INT8/FP8, INT4 (rotations, smoothing), NVFP4 — bit for bit where the formats are
exact — plus the token reductions, the ΔS table (fp32-accurate) and the operand key order. On the GPU and under
Triton's CPU interpreter."""

from __future__ import annotations

import textwrap

import pytest
import torch

from kernel_helpers import (
    REPO, INT4_RECIPES, NVFP4_RECIPES, HAS_TRITON, needs_cuda, interpreter_kernels, run_interpreted, make_qkv)


def test_operand_key_order_swaps_the_accumulator_and_operand_columns():
    """Within 16 keys, the wgmma accumulator gives a thread keys 8a + 2q + e, the FP8 operand wants 4q + 2a + e
    (PTX ISA, wgmma register fragments): Vᵀ column 4q + 2a + e holds key 8a + 2q + e, a permutation inside
    16-key groups."""
    from lowbit_video.kernels.prepass import operand_key_order

    first = [0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15]
    keys = operand_key_order(256)
    assert keys[:16].tolist() == first
    assert torch.equal(keys.view(16, 16) - torch.arange(0, 256, 16)[:, None], torch.tensor(first).expand(16, 16))


@pytest.mark.gpu
@needs_cuda
def test_prepass_is_bit_exact_against_formats():
    """Without rotation the pre-pass input is exact, so folded value · 2^R must equal
    formats.mxfp4.fake_quantize bit for bit (Q/K along head_dim, V along tokens)."""
    from lowbit_video.formats import mxfp4
    from lowbit_video.kernels import prepass
    from lowbit_video.recipes import load_recipe

    spec = load_recipe("mxfp4-tfs").attention
    q, k, v = make_qkv(1, 2, 300, 300, 128, outliers=True)
    qq, rq, bad = prepass.mx_rows(q.cuda(), "BHND", spec.q, fp8=True)
    assert int(bad.item()) == 0
    scale = torch.exp2(rq.float()).repeat_interleave(128, dim=1)[:, :300, None]
    got = (qq[:, :300].float() * scale.cuda()).cpu().reshape(1, 2, 300, 128)
    want = mxfp4.fake_quantize(q.double(), rule="tfs", axis=-1).float()
    assert torch.equal(got, want)
    vv, rv, bad = prepass.mx_cols(v.cuda(), "BHND", spec.v, fp8=True)
    got = (vv[:, :, :300].float() * torch.exp2(rv.float())[:, :, None]).transpose(1, 2).cpu().reshape(1, 2, 300, 128)
    want = mxfp4.fake_quantize(v.double(), rule="tfs", axis=-2).float()
    assert torch.equal(got, want)


def _int8_ties(b, h, n, d):
    """fp32 Q, K, V whose INT8 (Q, K) and E4M3 (V, `_e4m3_ties`) quotients are exact ties for about half the
    elements. Every Q / K row has |max| 127 · 255/16, so its scale is 255/16, whose fp32 reciprocal is about as
    far from 16/255 as a rounding can be (a quotient formed by multiplying with it misses half of these ties);
    the other entries are (2c + 1) · 255/32 (ties between c and c + 1) or c · 255/16. K's second half of tokens
    negates the first, so its token mean is exactly 0 and smoothing leaves the ties in place."""
    g = torch.Generator().manual_seed(n + d)
    c = torch.randint(-126, 126, (b, h, n, d), generator=g).double()
    tie = torch.rand(b, h, n, d, generator=g) < 0.5
    x = torch.where(tie, (2 * c + 1) * 255 / 32, c * 255 / 16)
    x[..., 0] = torch.where(torch.rand(b, h, n, generator=g) < 0.5, 127 * 255 / 16, -127 * 255 / 16)
    k = x.clone()
    k[:, :, n // 2:] = -k[:, :, : n - n // 2]
    return x.float(), k.float(), _e4m3_ties(b, h, n, d, g)


def _e4m3_ties(b, h, n, d, g):
    """fp32 V whose E4M3 quotients are exact midpoints between grid points for about half the elements: every
    channel's |max| is 448 · its scale, 255/16 or 237/16 (fp32 reciprocals about as far from exact as a rounding
    can be, above and below: a quotient formed with them lands on either side of a tie), the other entries are
    ± grid points or ± midpoints (2^-10 .. 432) times the scale, a third of those midpoints one fp32 step off."""
    grid = [k * 2.0 ** -9 for k in range(8)] + [m * 2.0 ** (e - 3) for e in range(-6, 9) for m in range(8, 16)]
    grid = torch.tensor([x for x in grid if x <= 448], dtype=torch.float64)
    mids = (grid[1:] + grid[:-1]) / 2
    pick_mid = torch.rand(b, h, n, d, generator=g) < 0.5
    vals = torch.where(pick_mid, mids[torch.randint(len(mids), (b, h, n, d), generator=g)],
                       grid[torch.randint(len(grid), (b, h, n, d), generator=g)])
    sign = torch.where(torch.rand(b, h, n, d, generator=g) < 0.5, -1.0, 1.0)
    scale = torch.where(torch.arange(d) % 2 == 0, 255 / 16, 237 / 16).double()
    v = (sign * vals * scale).float()
    # a third of the midpoints one fp32 step off, either way: the rounding is decided by that step, and the
    # quotient formed in fp32 can miss it (the midpoints below a power of two are half as far from it)
    nudge = pick_mid & (torch.rand(b, h, n, d, generator=g) < 0.33)
    away = torch.where(torch.rand(b, h, n, d, generator=g) < 0.5, 2.0, 0.0) * v
    v = torch.where(nudge, torch.nextafter(v, away), v)
    v[:, :, 0, :] = (448 * scale).float()
    return v


def _tiny_scales(b, h, nq, nk, d):
    """fp32 Q, K, V with some scales below prepass.SMALLEST_FP32_PATH_SCALE (the pre-pass's fp64 path) and
    some subnormal entries, in programs that also hold ordinary rows: Q tokens 0-2 and 20 times 2^-120 (token 20
    also with a subnormal entry), K's head 1 times 2^-118 (its mean too), V's channels 0-3 times 2^-120."""
    q, k, v = make_qkv(b, h, nq, nk, d, outliers=False, seed=5, dtype=torch.float32)
    q[:, :, [0, 1, 2, 20]] *= 2.0 ** -135
    q[:, :, 20, 3] = 2.0 ** -140
    k[:, 1] *= 2.0 ** -133
    v[..., :4] *= 2.0 ** -135
    return q, k, v


def _k_offsets(b, h, n, d, spread, seed=7):
    """fp32 K whose channels sit on one large common value, 2^26 + 8·j with integer j in [0, spread] (8 = the fp32
    step there; every sum is an exact integer in fp64, so the mean is the same in any order): the smoothed values
    are small against the mean (|mean| / scale about 2^26 · 127 / 160 at spread 40, 2^26 · 127 / 4 at spread 1),
    where a quotient formed from fp32 parts of the mean would lose its low bits. Q and V ordinary."""
    g = torch.Generator().manual_seed(seed)
    q, _, v = make_qkv(b, h, n, n, d, outliers=False, seed=seed, dtype=torch.float32)
    k = (2.0 ** 26 + 8.0 * torch.randint(0, spread + 1, (b, h, n, d), generator=g)).float()
    return q, k, v


def _ragged_groups(b, h, d, dtype=torch.bfloat16):
    """138 keys: the second 128-key block holds 10 (every per-thread group, two of them with one token of their
    pair, (n mod 8) div 2 = 0 and 1), K off zero, and its last token (group 0) 50 times the others' size: a scale
    that took any key past the end, or another group's token, in place of a missing one would differ."""
    q, k, v = make_qkv(b, h, 138, 138, d, outliers=False, seed=11, dtype=torch.float32)
    k = k + 3.0
    k[:, :, 137] *= 50.0
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _k_per_thread_groups(k64, block=128):
    """sage2-int8's K codes and each token's scale by formats.intq, one scale per SageAttention2 per-thread group:
    in each `block` keys, those with equal (n mod 8) div 2."""
    from lowbit_video.formats import intq

    b, h, n, d = k64.shape
    codes = torch.empty((b, h, n, d), dtype=torch.int8)
    scales = torch.empty((b, h, n), dtype=torch.float32)
    for start in range(0, n, block):
        for t in range(4):
            idx = [i for i in range(start, min(start + block, n)) if (i % 8) // 2 == t]
            if idx:
                e = intq.quantize(k64[:, :, idx].reshape(b, h, len(idx) * d), bits=8, axis=-1)
                codes[:, :, idx] = e.codes.reshape(b, h, len(idx), d)
                scales[:, :, idx] = e.scales.reshape(b, h, 1)
    return codes, scales


def _sage_prepass_vs_formats(q, k, v):
    """Mismatch counts of the sage2 pre-pass (codes and scales, on q's device) against formats.intq /
    formats.fp8 applied to the reference's operands (K smoothed by its fp64 mean over tokens, in per-thread
    groups)."""
    from lowbit_video.formats import fp8, intq
    from lowbit_video.kernels import prepass

    b, h, nq, d = q.shape
    nk = k.shape[2]
    qc, qs, kc, ks, vt, sv = (t.cpu() for t in prepass.sage_prepass(q, k, v, "BHND"))
    q64, k64, v64 = (t.cpu().double() for t in (q, k, v))
    eq = intq.quantize(q64, bits=8, axis=-1)
    ek_codes, ek_scales = _k_per_thread_groups(k64 - k64.mean(dim=-2, keepdim=True))
    ev = fp8.quantize(v64, fmt="e4m3", axis=-2)
    return {
        "q_codes": int((qc[:, :nq].reshape(b, h, nq, d) != eq.codes.reshape(b, h, nq, d)).sum()),
        "q_scales": int((qs[:, :nq].reshape(b, h, nq) != eq.scales.reshape(b, h, nq)).sum()),
        "k_codes": int((kc[:, :nk].reshape(b, h, nk, d) != ek_codes).sum()),
        "k_scales": int((ks[:, :nk].reshape(b, h, nk) != ek_scales).sum()),
        "v_codes": int((vt[:, :, :nk].float().reshape(b, h, d, nk).transpose(-1, -2)
                        != ev.codes.float().reshape(b, h, d, nk).transpose(-1, -2)).sum()),
        "v_scales": int((sv.reshape(b, h, d) != ev.scales.reshape(b, h, d)).sum()),
    }


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_sage_prepass_is_bit_exact_against_formats(dtype, head_dim):
    """INT8 Q/K (K smoothed) and E4M3 V codes and scales equal the engine's bit for bit. bf16-valued V
    has exact E4M3 ties (about 0.4 % of the elements here), which must round to even."""
    q, k, v = make_qkv(2, 3, 300, 200, head_dim, outliers=False, seed=364, dtype=dtype)
    bad = _sage_prepass_vs_formats(q.cuda(), k.cuda(), v.cuda())
    assert not any(bad.values()), bad
    # INT8 quotients on exact .5 ties for half the elements (round half to even), with a scale of 255/16
    bad = _sage_prepass_vs_formats(*(t.cuda() for t in _int8_ties(2, 3, 300, head_dim)))
    assert not any(bad.values()), bad
    # scales small enough for the fp64 path, beside ordinary rows in the same programs
    bad = _sage_prepass_vs_formats(*(t.cuda() for t in _tiny_scales(2, 3, 300, 200, head_dim)))
    assert not any(bad.values()), bad
    # K far from zero against its spread
    for spread in (40, 1):
        bad = _sage_prepass_vs_formats(*(t.cuda() for t in _k_offsets(2, 3, 300, head_dim, spread)))
        assert not any(bad.values()), (spread, bad)
    bad = _sage_prepass_vs_formats(*(t.cuda() for t in _ragged_groups(2, 3, head_dim, dtype)))
    assert not any(bad.values()), bad


_SAGE_INTERP_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    from test_kernels_prepass import _int8_ties, _k_offsets, _ragged_groups, _sage_prepass_vs_formats, _tiny_scales
    from kernel_helpers import make_qkv
    from lowbit_video.kernels import prepass
    res = {{}}
    for dt in (torch.bfloat16, torch.float32):
        q, k, v = make_qkv(1, 2, 130, 200, 64, outliers=False, seed=364, dtype=dt)
        res[str(dt)] = _sage_prepass_vs_formats(q, k, v)
        # the Gluon kernel's key order: the same Vᵀ bytes, key t at slot operand_key_order[t]
        vt = prepass.sage_prepass(q, k, v, "BHND")[4]
        vt2 = prepass.sage_prepass(q, k, v, "BHND", operand_order=True)[4]
        keys = prepass.operand_key_order(vt.shape[-1])
        res[str(dt)]["operand_order_differs"] = not torch.equal(vt2.view(torch.uint8), vt[..., keys].view(torch.uint8))
    res["ties"] = _sage_prepass_vs_formats(*_int8_ties(1, 2, 130, 64))
    res["tiny"] = _sage_prepass_vs_formats(*_tiny_scales(1, 2, 130, 200, 64))
    res["offset40"] = _sage_prepass_vs_formats(*_k_offsets(1, 2, 130, 64, 40))
    res["offset1"] = _sage_prepass_vs_formats(*_k_offsets(1, 2, 130, 64, 1))
    res["ragged_groups"] = _sage_prepass_vs_formats(*_ragged_groups(1, 2, 64))
    # 2305 keys: ten 256-token chunks, more than the statistics kernel loads at once (a ragged second load)
    res["long"] = _sage_prepass_vs_formats(*make_qkv(1, 1, 2305, 2305, 64, outliers=True, seed=5,
                                                     dtype=torch.bfloat16))
    print(json.dumps(res))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
def test_sage_prepass_bit_exact_under_triton_interpreter_on_cpu():
    """The sage2 pre-pass through TRITON_INTERPRET=1: codes and scales equal formats.intq / formats.fp8
    bit for bit, bf16-valued data (exact E4M3 ties in V) included; Vᵀ in the Gluon kernel's key order is the
    same bytes permuted."""
    res = run_interpreted(_SAGE_INTERP_SCRIPT.format(tests=str(REPO / "tests")))
    for dt, bad in res.items():
        assert not any(bad.values()), (dt, bad)


def _int4_prepass_vs_reference(q, k, v, recipe, rope_segments=None):
    """The INT4 pre-pass (on q's device) against formats.intq applied to the reference engine's own
    operands (rotation of lowbit_video.transforms, then smoothing, in float64): fraction of codes that
    differ, the largest code difference, and the largest relative scale difference, per operand."""
    from lowbit_video.formats import intq
    from lowbit_video.kernels import prepass
    from lowbit_video.recipes import load_recipe
    from lowbit_video.transforms import hadamard_matrix, qk_rotation, smooth_k, smooth_q

    spec = load_recipe(recipe).attention
    b, h, nq, d = q.shape
    nk = k.shape[2]
    qc, qs, qm, kc, ks, kf, vt, sv = (t.cpu() for t in prepass.int4_prepass(q, k, v, "BHND", spec, rope_segments))
    keys = prepass.operand_key_order(vt.shape[-1])
    vt = torch.empty_like(vt).index_copy_(-1, keys, vt)  # back to token order (Vᵀ is in the MMA operand's order)
    q64, k64, v64 = (t.cpu().double() for t in (q, k, v))
    if spec.rotation != "none":
        rot = qk_rotation(spec.rotation, d, rope_segments or spec.rope_segments)
        q64, k64 = rot.apply(q64), rot.apply(k64)
    if spec.rotate_v:
        v64 = v64 @ hadamard_matrix(d)
    if spec.smooth_k:
        k64, _ = smooth_k(k64)
    if spec.smooth_q:
        q64, _ = smooth_q(q64, spec.smooth_q_group)
    res = {}
    for name, codes, scales, x, axis in (
            ("q", qc[:, :nq].reshape(b, h, nq, d), qs[:, :nq].reshape(b, h, nq), q64, -1),
            ("k", kc[:, :nk].reshape(b, h, nk, d), ks[:, :nk].reshape(b, h, nk), k64, -1),
            ("v", vt[:, :, :nk].reshape(b, h, d, nk).transpose(-1, -2), sv.reshape(b, h, d), v64, -2)):
        e = intq.quantize(x, bits=4, axis=axis)
        want = e.codes.reshape(b, h, d, nk).transpose(-1, -2) if name == "v" else e.codes.reshape(codes.shape)
        dc = (codes.to(torch.int16) - want.to(torch.int16)).abs()
        es = e.scales.reshape(scales.shape).double()
        res[name] = [float((dc > 0).double().mean()), int(dc.max()),
                     float(((scales.double() - es).abs() / es).max())]
    return res


def _check_int4_prepass(res):
    for name, (frac, maxd, srel) in res.items():
        # fp32 vs float64 before the rounding: rare ±1 code moves at rounding boundaries, scales to ~fp32 ulp
        assert frac <= 1e-3 and maxd <= 1 and srel <= 1e-5, (name, frac, maxd, srel)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", INT4_RECIPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int4_prepass_matches_formats(recipe, dtype):
    """fp32 inputs take the IEEE rotation, 16-bit inputs the MMA in their own dtype (Q, K and V)."""
    q, k, v = make_qkv(2, 3, 300, 200, 128, outliers=True, seed=7, dtype=dtype)
    _check_int4_prepass(_int4_prepass_vs_reference(q.cuda(), k.cuda(), v.cuda(), recipe))


def _nvfp4_prepass_vs_formats(q, k, v, recipe):
    """The NVFP4 pre-pass against formats.nvfp4.fake_quantize of the reference engine's operands: the largest
    absolute difference of Q̂, K̂, V̂ (tensor scale applied in float64) and of the smoothed K and the Q group means,
    and whether the kernel's 16-bit operands hold E2M1·s_b exactly."""
    from lowbit_video.formats import nvfp4
    from lowbit_video.kernels import prepass
    from lowbit_video.recipes import load_recipe
    from lowbit_video.transforms import smooth_k, smooth_q

    spec = load_recipe(recipe).attention
    b, h, nq, d = q.shape
    nk = k.shape[2]
    qq, qs, qm, kk, ks, kf, vt, vs = (t.cpu() for t in prepass.nvfp4_prepass(q, k, v, "BHND", spec))
    q64, k64, v64 = (t.cpu().double() for t in (q, k, v))
    if spec.smooth_k:
        k64, _ = smooth_k(k64)
    qmean = None
    if spec.smooth_q:
        q64, qmean = smooth_q(q64, spec.smooth_q_group)
    res = {}
    for name, got, s, x, axis in (("q", qq[:, :nq].reshape(b, h, nq, d), qs, q64, -1),
                                  ("k", kk[:, :nk].reshape(b, h, nk, d), ks, k64, -1),
                                  ("v", vt[:, :, :nk].reshape(b, h, d, nk).transpose(-1, -2), vs, v64, -2)):
        want = nvfp4.fake_quantize(x, block=16, axis=axis, outer_scale=spec.operand(name).outer_scale)
        res[name] = float((got.double() * s.double() - want).abs().max())
    if kf.dim() == 3:  # the smoothed K for ΔS (the Triton path of nvfp4 has no Q smoothing and writes none)
        res["k_full"] = float((kf[:, :nk].reshape(b, h, nk, d).double() - k64.float().double()).abs().max())
    if qmean is not None:
        res["q_mean"] = float((qm.reshape(b, h, -1, d).double()
                               - qmean[:, :, ::spec.smooth_q_group].float().double()).abs().max())
    res["pads_zero"] = float(qq[:, nq:].abs().sum() + kk[:, nk:].abs().sum() + vt[:, :, nk:].abs().sum())
    return res


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@pytest.mark.parametrize("recipe", NVFP4_RECIPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nvfp4_prepass_is_bit_exact_against_formats(recipe, dtype):
    q, k, v = make_qkv(2, 2, 150, 140, 64, outliers=True, seed=5, dtype=dtype)
    res = _nvfp4_prepass_vs_formats(q, k, v, recipe)
    assert all(val == 0.0 for val in res.values()), res


_NVFP4_PRE_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    from test_kernels_prepass import _nvfp4_prepass_vs_formats
    from kernel_helpers import make_qkv
    res = {{}}
    for dt in ("bfloat16", "float16", "float32"):
        q, k, v = make_qkv(2, 2, 150, 140, 64, outliers=True, seed=5, dtype=getattr(torch, dt))
        res[dt] = _nvfp4_prepass_vs_formats(q, k, v, "nvfp4")
    print(json.dumps(res))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
def test_nvfp4_triton_prepass_bit_exact_under_triton_interpreter_on_cpu():
    """nvfp4's Triton pre-pass (no smoothing: exact midpoint rounding, kernels/_rounding.py) through
    TRITON_INTERPRET=1: Q̂, K̂, V̂ equal formats.nvfp4 bit for bit for bf16, fp16 and fp32 inputs."""
    res = run_interpreted(_NVFP4_PRE_SCRIPT.format(tests=str(REPO / "tests")))
    assert set(res) == {"bfloat16", "float16", "float32"}
    for dt, r in res.items():
        assert all(val == 0.0 for val in r.values()), (dt, r)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", NVFP4_RECIPES)
def test_nvfp4_prepass_matches_formats_on_gpu(recipe):
    q, k, v = make_qkv(2, 3, 300, 200, 128, outliers=True, seed=7, dtype=torch.float32)
    res = _nvfp4_prepass_vs_formats(q.cuda(), k.cuda(), v.cuda(), recipe)
    assert all(val == 0.0 for val in res.values()), res


_MX_PREPASS_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    from kernel_helpers import make_qkv
    from lowbit_video.formats import mxfp4
    from lowbit_video.kernels import prepass
    from lowbit_video.recipes import load_recipe

    res = {{}}
    for recipe in ("mxfp4-tfs", "mxattention", "mxfp4-ocp"):
        spec = load_recipe(recipe).attention
        kw = dict(rule=spec.q.rule, q=spec.q.qmax) if spec.q.rule == "uos" else dict(rule=spec.q.rule)
        q, k, v = make_qkv(1, 2, 200, 200, 64, outliers=True)
        v[0, 1, :, 5] = 0.0  # an all-zero channel: its fold exponent is 0
        v[0, 0, 130:, 7] *= 2.0 ** -20  # a channel whose tail blocks sit far below its maximum
        qq, rq, _ = prepass.mx_rows(q, "BHND", spec.q, fp8=True)
        scale = torch.exp2(rq.float()).repeat_interleave(128, dim=1)[:, :200, None]
        got_q = (qq[:, :200].float() * scale).reshape(1, 2, 200, 64)
        want_q = mxfp4.fake_quantize(q.double(), axis=-1, **kw).float()
        vv, rv, bad = prepass.mx_cols(v, "BHND", spec.v, fp8=True)
        got_v = (vv[:, :, :200].float() * torch.exp2(rv.float())[:, :, None]).transpose(1, 2).reshape(1, 2, 200, 64)
        want_v = mxfp4.fake_quantize(v.double(), axis=-2, **kw).float()
        exact_v = ~(got_v != want_v).any(dim=-2)  # channels equal bit for bit
        # the BNHD layout reduces another dimension for the channel exponents: the same bits
        vv2, rv2, _ = prepass.mx_cols(v.transpose(1, 2).contiguous(), "BNHD", spec.v, fp8=True)
        same_layouts = bool(torch.equal(vv2.view(torch.uint8), vv.view(torch.uint8)) and torch.equal(rv2, rv))
        # the Gluon kernel's key order: the same bytes, key t at slot operand_key_order[t]
        vv3, rv3, _ = prepass.mx_cols(v, "BHND", spec.v, fp8=True, operand_order=True)
        keys = prepass.operand_key_order(vv.shape[-1])
        operand_order = bool(torch.equal(vv3.view(torch.uint8), vv[..., keys].view(torch.uint8)) and torch.equal(rv3, rv))
        # 2305 tokens: ten |max| partials per channel, more than the exponent kernel loads at once
        vl = make_qkv(1, 1, 8, 2305, 64, outliers=False, seed=11)[2]
        vvl, rvl, badl = prepass.mx_cols(vl, "BHND", spec.v, fp8=True)
        got_l = (vvl[:, :, :2305].float() * torch.exp2(rvl.float())[:, :, None]).transpose(1, 2).reshape(1, 1, 2305, 64)
        long_mismatch = int((got_l != mxfp4.fake_quantize(vl.double(), axis=-2, **kw).float()).sum()) + int(badl.item())
        res[recipe] = dict(q_mismatch=int((got_q != want_q).sum()), v_bad_blocks=int(bad.item()), long_mismatch=long_mismatch,
                           v_mismatch_channels=int((~exact_v).sum()), pad_zero=bool((vv[:, :, 200:] == 0).all()),
                           zero_channel_exp=int(rv[1, 5]), bnhd_same=same_layouts, operand_order=operand_order)
    print(json.dumps(res))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@interpreter_kernels
def test_mx_prepass_bit_exact_under_triton_interpreter_on_cpu():
    """The MXFP4 pre-pass (Q/K rows; V: channel exponents from one min/max reduction, then a pass over token tiles)
    against formats.mxfp4 bit for bit, under the CPU interpreter: three scale rules, a ragged last tile, an
    all-zero V channel, and one channel whose tail blocks lie 2^-20 below its maximum (the only blocks E4M3
    cannot fold: counted, and the only mismatching channel); V in the BNHD layout gives the same bits, and in the
    Gluon kernel's key order the same bytes permuted."""
    res = run_interpreted(_MX_PREPASS_SCRIPT.format(tests=str(REPO / "tests")))
    for recipe, r in res.items():
        assert r["q_mismatch"] == 0 and r["pad_zero"] and r["zero_channel_exp"] == 0 and r["bnhd_same"], (recipe, r)
        assert r["long_mismatch"] == 0, (recipe, r)
        assert r["operand_order"], (recipe, r)
        assert r["v_bad_blocks"] > 0 and r["v_mismatch_channels"] == 1, (recipe, r)


_TOKEN_REDUCE_SCRIPT = textwrap.dedent(
    """
    import json, torch
    from lowbit_video.kernels import prepass
    res = {}
    g = torch.Generator().manual_seed(3)
    for dt in (torch.bfloat16, torch.float32):
        x = (torch.randn(2, 3, 2100, 64, generator=g) * torch.rand(1, 3, 1, 64, generator=g) * 50).to(dt)
        x[1, 2, 2099, 7] = -1e4  # the largest |x| of a channel in the ragged last chunk, negative
        for layout, t in (("BHND", x), ("BNHD", x.transpose(1, 2).contiguous())):
            want_mean = x.double().mean(dim=2).reshape(6, 64)
            mean = prepass.token_mean64(t, layout)
            amax = prepass.token_absmax(t, layout)
            res[f"{dt}-{layout}"] = dict(
                mean_err=float((mean - want_mean).abs().max() / want_mean.abs().max()),
                mean_dtype=str(mean.dtype),
                amax_equal=bool(torch.equal(amax, x.abs().amax(dim=2).float().reshape(6, 64))))
    print(json.dumps(res))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@interpreter_kernels
def test_token_mean_and_absmax_under_triton_interpreter():
    """The pre-passes' token reductions (K's fp64 mean for smoothing, V's channel maxima for scales and MXFP4 fold
    exponents) against torch, both layouts, 2100 tokens (three 1024-token chunks, the last ragged): the mean in
    fp64 to summation-order rounding, the maximum |x| exactly."""
    res = run_interpreted(_TOKEN_REDUCE_SCRIPT)
    for case, r in res.items():
        assert r["mean_dtype"] == "torch.float64" and r["mean_err"] < 1e-13 and r["amax_equal"], (case, r)


def _delta_s_accuracy(device: str) -> dict:
    """prepass.delta_s_table against float64 qm·kfᵀ: the worst entry error in fp32 ulps of |qm|·|kf|."""
    from lowbit_video.kernels import prepass

    g = torch.Generator().manual_seed(0)
    qm = torch.randn(3, 70, 64, generator=g) * 4  # 70 q groups: a ragged last chunk of 64
    kf = torch.randn(3, 256, 64, generator=g) * 9
    kf[:, 5] *= 1e-6  # a tiny key: accuracy per entry, not only in norm
    t = prepass.delta_s_table(qm.to(device), kf.to(device)).cpu()
    want = qm.double() @ kf.double().transpose(1, 2)
    ulp = torch.finfo(torch.float32).eps * (qm.double().abs() @ kf.double().abs().transpose(1, 2))
    return {"shape": list(t.shape), "worst": float(((t.double() - want).abs() / ulp).max())}


def _check_delta_s(res):
    # 3xTF32 carries ~fp32 precision: every entry within a few fp32 ulps of |qm|·|kf| (plain TF32 is ~2^10 worse)
    assert res["shape"] == [3, 70, 256] and res["worst"] < 8, res


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@interpreter_kernels
@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
def test_delta_s_table_takes_contiguous_operands_only():
    """A copy made inside would be a torch op no call plan replays: a strided operand is a one-line error."""
    from lowbit_video.kernels import prepass

    qm, kf = torch.zeros(2, 64, 4), torch.zeros(2, 64, 4)
    with pytest.raises(ValueError, match="contiguous"):
        prepass.delta_s_table(qm.transpose(1, 2).contiguous().transpose(1, 2), kf)


def test_delta_s_table_is_fp32_accurate_under_triton_interpreter():
    script = (f"import json, sys; sys.path.insert(0, {str(REPO / 'tests')!r}); "
              "from test_kernels_prepass import _delta_s_accuracy; print(json.dumps(_delta_s_accuracy('cpu')))")
    _check_delta_s(run_interpreted(script))


@pytest.mark.gpu
@needs_cuda
def test_delta_s_table_is_fp32_accurate_on_gpu():
    _check_delta_s(_delta_s_accuracy("cuda"))
