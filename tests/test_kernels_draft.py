"""DraftAttention2's GPU path (kernels/draft.py, draft_prepass.py, `draft_fwd` in kernels/_core.py) against
the reference engine (lowbit_video/attention/draft*.py).

What must be equal and why:
- the pre-pass operands and pooled descriptors: bit for bit (same formats, fp64 quotients rounded once);
- the routing decision: equal codes (checked). The route kernels (kernels/draft_route.py) compute the
  engine's float64 draft map up to the order of each row's sum (checked within its rounding bound) and hand
  out the quotas exactly as the engine's stable ranking does on a given map, ties across a boundary included
  (checked on maps full of exact ties); the pooled descriptors are bit-equal, so only a near-tie of two
  scores (float64 summation order, there and in the GPU matmul) could flip a decision;
- the output, given one routing decision: the kernel's P̃ is an fp32 exp2 (the engine's float64), its
  16-bit phase multiplies P̃ rounded to the input dtype, and the output is rounded to the input dtype. So
  the kernel–engine difference is held to the 16-bit rounding floor, two roundings of the input dtype's
  unit roundoff u (2u: 2^-10 for fp16, 2^-7 for bf16; measured ≈ 0.55u for both, on the interpreter and
  the H200), and, per low-bit phase, to at most 5 % of that phase's own quantization error (engine at
  that precision vs. engine at 16 bit on the same sparsity pattern).

CPU: the checks run through Triton's interpreter (TRITON_INTERPRET=1, fp16: the interpreter's bf16 MMA is
wrong) in a subprocess; GPU tests (bf16 and fp16, larger shapes) skip on CPU with a reason.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
FLOOR = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}  # 2u of the dtype (module docstring)
RATIO = 0.05

from kernel_helpers import HAS_TRITON, interpreter_kernels, needs_cuda, run_interpreted  # noqa: E402  (shared)


def rel_l2(a, b) -> float:
    a, b = a.double(), b.double()
    n = float(b.norm())
    return float((a - b).norm()) / n if n > 0 else float((a - b).norm())


def make_qkv(geo, b, h, d, *, dtype, device="cpu", seed=0, outliers=False, ties=False):
    g = torch.Generator().manual_seed(seed)
    n = geo.tokens
    q, k, v = (torch.randn(b, h, n, d, generator=g) for _ in range(3))
    if outliers:
        ch = torch.randperm(d, generator=g)[:3]
        q[..., ch] *= 8.0
        k[..., ch] *= 8.0
        k = k + 2.0
        v[..., torch.randperm(n, generator=g)[:5], :] *= 20.0
        q, k = q / 3.0, k / 3.0
    if ties == "int8":
        # every region block's amax 31.75 -> INT8 scale 1/4 exactly; multiples of 1/8 -> half the
        # quotients x / s are exact .5 ties
        q, k, v = (((t * 8).round() / 8).clamp(-31, 31) for t in (q * 6, k * 6, v * 6))
        for t in (q, k):
            t[..., 0] = 31.75
    elif ties == "nvfp4":
        # tensor amax 42 -> outer scale 1/64 exactly; each 16-channel block's amax 6 -> s_b = 64, step 1;
        # multiples of 1/4 -> E2M1 midpoint ties (0.25, 0.75, 1.25, 1.75, 2.5, ...)
        q, k = (((t * 8).round() / 4).clamp(-6, 6) for t in (q, k))
        for t in (q, k):
            t[..., ::16] = 6.0
            t[..., -1, 0] = 42.0  # a video token (the prefix is not quantized)
    elif ties == "nvfp4-scale":
        # tensor amax 42 -> outer scale 1/64 exactly; block maxima m·6/64 for E4M3 midpoints m (normal, subnormal,
        # ties to either side): amax / (6·s_o) = m exactly, the block scale's own tie
        mids = torch.tensor([1.0625, 1.1875, 0.5 * 1.0625, 0.015625 * 1.0625, 1.5 * 2.0**-9, 2.5 * 2.0**-9, 13.5])
        amax = (mids * 6 / 64)
        q, k = ((t.abs() / t.abs().amax(-1, keepdim=True).clamp(min=1e-3)) for t in (q, k))
        for t in (q, k):
            blocks = t.view(*t.shape[:-1], -1, 16)
            blocks *= amax[torch.arange(blocks.shape[-2]) % len(mids)][:, None]
            blocks[..., 0] = amax[torch.arange(blocks.shape[-2]) % len(mids)]
            t[..., -1, 0] = 42.0
        v = amax[torch.arange(d) % len(mids)].expand(v.shape).clone()  # every 16-token block of channel c: max m_c
        v[..., -1, 0] = 42.0
    return tuple(t.to(dtype).to(device) for t in (q, k, v))


# ------------------------------------------------------------------ checks (run on GPU or in the interpreter)


def check_prepass(device, dtype, d=64, ties=False):
    """Pre-pass operands and pooled descriptors vs the engine's `prepare_operands` / `pool_regions`."""
    from lowbit_video.attention.draft_exec import prepare_operands
    from lowbit_video.draft.layout import VideoGeometry, pack_layout
    from lowbit_video.draft.scores import pool_regions
    from lowbit_video.kernels.draft_prepass import draft_prepass

    geo = VideoGeometry(2, 7, 11, prefix=3)
    q, k, v = make_qkv(geo, 1, 2, d, dtype=dtype, device=device, outliers=True, ties=ties)
    lay = pack_layout(geo, 64)
    R, P, S = lay.regions, geo.prefix, lay.slots
    pre = draft_prepass(q, k, v, "BHND", lay.gather.to(device), lay.counts.to(device), 64, P)
    bad = {}
    for name, x in (("q", q), ("k", k), ("v", v)):
        xp = lay.pack(x[..., P:, :].double().cpu())
        ops = prepare_operands(xp, xp, xp, 64, (8, 4))
        if name in "qk":
            s8 = pre[f"{name}s8"]
            x8 = pre[f"{name}8"].cpu().double().view(1, 2, R, 64, d) * s8.cpu().double().view(1, 2, R, 1, 1)
            bad[f"{name}8"] = int((x8.reshape(1, 2, S, d) != ops[8].q).sum())
            x4 = pre[f"{name}4"].cpu().double().view(1, 2, S, d) * pre["s4"][:, "qk".index(name)].cpu().double().view(1, 2, 1, 1)
            bad[f"{name}4"] = int((x4 != ops[4].q).sum())
            mean, mx = pool_regions(xp, lay)
            bad[f"{name}_pool"] = int((pre[f"{name}_mean"].cpu() != mean).sum() + (pre[f"{name}_max"].cpu() != mx).sum())
            bad[f"{name}16"] = int((pre[f"{name}16"].cpu().double().view(1, 2, S, d) != xp).sum())
        else:
            v8 = pre["v8t"].cpu().float().double().view(1, 2, d, S).transpose(-1, -2) * pre["vs8"].cpu().double().view(1, 2, 1, d)
            bad["v8"] = int((v8 != ops[8].v).sum())
            v4 = pre["v4t"].cpu().double().view(1, 2, d, S).transpose(-1, -2) * pre["s4"][:, 2].cpu().double().view(1, 2, 1, 1)
            bad["v4"] = int((v4 != ops[4].v).sum())
            bad["v16"] = int((pre["v16"].cpu().double().view(1, 2, S, d) != xp).sum())
    return bad


def _engine_packed(q, k, v, codes, lay, P, scale):
    from lowbit_video.attention.draft_exec import run_phases

    qd, kd, vd = (t.double().cpu() for t in (q, k, v))
    out, _, _, _ = run_phases(lay.pack(qd[..., P:, :]), lay.pack(kd[..., P:, :]), lay.pack(vd[..., P:, :]), codes.cpu(),
                           lay, scale=scale, prefix_k=kd[..., :P, :], prefix_v=vd[..., :P, :])
    return lay.unpack(out)


def check_phases(device, dtype, d=64, b=1, h=2, frames=2, height=8, width=10, prefix=5, layout="BHND", config=None,
                 maps=("16", "8", "4", "mix")):
    """Per forced code map (all 16 / all 8 / all 4 / random mix incl. skips): [kernel vs engine, the
    phase's own error (engine at that precision vs engine at 16 bit, same support)]. `config`: kernel settings."""
    from lowbit_video.draft.layout import VideoGeometry, pack_layout
    from lowbit_video.kernels.draft import draft_attention

    geo = VideoGeometry(frames, height, width, prefix=prefix)
    q, k, v = make_qkv(geo, b, h, d, dtype=dtype, device=device, outliers=True, seed=3)
    lay = pack_layout(geo, 64)
    R, P, scale = lay.regions, geo.prefix, d**-0.5
    g = torch.Generator().manual_seed(1)
    mix = torch.tensor([0, 4, 8, 16])[torch.randint(0, 4, (b, h, R, R), generator=g)]
    res = {}
    for name, codes in (("16", torch.full((b, h, R, R), 16)), ("8", torch.full((b, h, R, R), 8)),
                        ("4", torch.full((b, h, R, R), 4)), ("mix", mix)):
        if name not in maps:
            continue
        args = [t.transpose(1, 2).contiguous() if layout == "BNHD" else t for t in (q, k, v)]
        out = draft_attention(*args, "draftattention2", geo, layout=layout, codes=codes.to(device), config=config).cpu()
        if layout == "BNHD":
            out = out.transpose(1, 2)
        ref = _engine_packed(q, k, v, codes, lay, P, scale)
        ref16 = _engine_packed(q, k, v, torch.where(codes > 0, 16, 0), lay, P, scale)
        res[name] = [rel_l2(out[..., P:, :], ref), rel_l2(ref, ref16)]
        if P:  # prefix queries: dense over every key
            dense = torch.softmax((q.double().cpu() @ k.double().cpu().transpose(-1, -2)) * scale, -1) @ v.double().cpu()
            res[name + "/prefix"] = [rel_l2(out[..., :P, :], dense[..., :P, :]), 0.0]
    return res


def check_routing(device, dtype, d=64):
    """The kernel path's own routing (draftattention2) equals the engine's, and so does the output."""
    from lowbit_video.attention.draft import draft_attention as engine
    from lowbit_video.draft.layout import VideoGeometry
    from lowbit_video.kernels.draft import draft_attention
    from lowbit_video.recipes import load_recipe

    geo = VideoGeometry(3, 8, 8, prefix=0)
    q, k, v = make_qkv(geo, 1, 2, d, dtype=dtype, device=device, seed=5)
    out, plan = draft_attention(q, k, v, "draftattention2", geo, return_plan=True)
    ref, diag = engine(*(t.double().cpu() for t in (q, k, v)), load_recipe("draftattention2").attention.draft, geo)
    return {"codes_differ": int((plan.codes.cpu() != diag.route.codes).sum()), "diff": rel_l2(out.cpu(), ref),
            "empty_rows_zero": bool((out.cpu()[(ref == 0).all(-1)] == 0).all())}


ROUTE_SPECS = (  # recipes' quotas, then an empty 16-bit, an empty 8-bit, full (no skip), all-16 and all-8 quotas
    ("draftattention2",), ("draftattention-sparse16",), dict(sparsity=0.5, fp16=0.0, int8=0.5, nvfp4=0.5),
    dict(sparsity=0.95, fp16=0.2, int8=0.0, nvfp4=0.8), dict(sparsity=0.0, fp16=0.3, int8=0.7),
    dict(sparsity=0.0, fp16=0.2, int8=0.0, nvfp4=0.8), dict(sparsity=0.0), dict(sparsity=0.0, fp16=0.0, int8=1.0))


def route_specs():
    from lowbit_video.recipes import DraftSpec, load_recipe

    return [load_recipe(s[0]).attention.draft if isinstance(s, tuple) else DraftSpec(**s) for s in ROUTE_SPECS]


def tied_scores(h, r, quotas, seed):
    """Draft maps (1, h, r, r) >= 0 full of exact ties, in random row-major positions: head 0 has runs of equal
    scores across every quota boundary (ranks t - 2 ... t + 1 share one score), head 1 is 97 % zeros (0.0 and
    -0.0, equal for the engine's sort) with the 8- and 4-bit boundaries among them, heads 2+ take 3 levels."""
    from lowbit_video.kernels.draft_route import quota_boundaries

    g = torch.Generator().manual_seed(seed)
    n = r * r
    heads = []
    for head in range(h):
        by_rank = torch.rand(n, generator=g, dtype=torch.float64).sort(descending=True).values
        if head == 0:
            for t in quota_boundaries(quotas, n):
                if 0 < t < n:
                    by_rank[max(t - 2, 0):t + 2] = by_rank[max(t - 2, 0)].clone()
        elif head == 1:
            by_rank[int(0.03 * n):] = 0.0
            by_rank[(by_rank == 0) & (torch.rand(n, generator=g) < 0.5)] = -0.0
        else:
            by_rank = (by_rank * 3).floor() / 3
        heads.append(by_rank[torch.randperm(n, generator=g)])
    return torch.stack(heads).view(1, h, r, r)


def check_route(device):
    """The route kernels (kernels/draft_route.py) against the references, as counts of differing entries and the
    mixed map's largest relative difference per unit of its tolerance:
    - codes of given score maps full of ties (`tied_scores`; R = 20 and 5: dense and sparse counting, 40: several
      programs per head) vs the engine's `allocate`, for every quota kind, and their lists vs `plan_reference`;
    - the whole route from pooled descriptors (`route_plan`) vs `allocate(draft_scores(...))`: descriptors with
      repeated rows (exact ties across the boundaries) and random ones, with and without the max-pooled map
      (random scores could differ from the engine's only at a near-tie: float64 rows summed in another order);
    - the mixed map vs `draft_scores`: float64 on both sides, each row's sum in another order (at most R/2 ulp
      of rounding on either side), each exp within 1 ulp, the division and the mix within 2 ulp per side, so
      |A - ref| <= (R + 8) * 2^-52 * ref."""
    from lowbit_video.draft.alloc import allocate, head_quotas
    from lowbit_video.draft.scores import draft_scores
    from lowbit_video.kernels.draft_route import mixed_scores, plan_from_scores, plan_reference, route_plan

    res = {"codes": 0, "plan": 0, "route_codes": 0, "route_plan": 0, "scores": 0.0}

    def compare_plan(plan, codes):
        ref = plan_reference(codes.to(torch.int8).to(device))
        return int((plan.idx != ref.idx).sum() + (plan.cnt != ref.cnt).sum())

    for i, spec in enumerate(route_specs()):
        for r, h in ((20, 3), (5, 2)) + (((40, 3),) if i == 0 else ()):  # 40: two select programs per head
            quotas = head_quotas(r, spec)
            s = tied_scores(h, r, quotas, seed=10 * i + r)
            plan = plan_from_scores(s.to(device), quotas)
            ref = allocate(s, quotas)
            res["codes"] += int((plan.codes.cpu().long() != ref).sum())
            res["plan"] += compare_plan(plan, ref)
    g = torch.Generator().manual_seed(4)
    spec = route_specs()[0]
    r, d = 13, 16
    for repeat, w in ((True, 0.5), (True, 0.0), (False, 0.5), (False, 0.0)):
        desc = [torch.randn(1, 2, r, d, generator=g, dtype=torch.float64) for _ in range(4)]
        if repeat:  # queries of 2 kinds, keys of 3: a handful of distinct scores per head, tied exactly as the
            # logits are exact (halves: no matmul rounding, which could differ between equal rows)
            desc = [(2 * x).round().clamp(-2, 2)[:, :, torch.arange(r) % (2 if j < 2 else 3)] / 2
                    for j, x in enumerate(desc)]
        quotas = head_quotas(r, spec)
        plan = route_plan(*(x.to(device) for x in desc), scale=d**-0.5, maxpool_weight=w, quotas=quotas)
        exact = draft_scores(*desc, scale=d**-0.5, maxpool_weight=w)
        ref = allocate(exact, quotas)
        res["route_codes"] += int((plan.codes.cpu().long() != ref).sum())
        res["route_plan"] += compare_plan(plan, ref)
        mixed = mixed_scores(*(x.to(device) for x in desc), scale=d**-0.5, maxpool_weight=w)[0].cpu()
        tol = (r + 8) * 2.0**-52 * exact
        res["scores"] = max(res["scores"], float(((mixed - exact).abs() / tol).max()))
    return res


def assert_route(res):
    assert res["codes"] == 0 and res["plan"] == 0 and res["route_codes"] == 0 and res["route_plan"] == 0, res
    assert res["scores"] <= 1.0, res


def assert_phases(res, dtype):
    for name, (diff, err) in res.items():
        assert diff <= FLOOR[dtype] + RATIO * err, (name, diff, err)


# ------------------------------------------------------------------------------------------- CPU (interpreter)

_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    import test_kernels_draft as t
    res = {{"prepass": t.check_prepass("cpu", torch.float16), "prepass_bf16": t.check_prepass("cpu", torch.bfloat16),
           "prepass_ties8": t.check_prepass("cpu", torch.bfloat16, ties="int8"),
           "prepass_ties4": t.check_prepass("cpu", torch.bfloat16, ties="nvfp4"),
           "prepass_ties4s": t.check_prepass("cpu", torch.bfloat16, ties="nvfp4-scale"),
           "phases": t.check_phases("cpu", torch.float16),
           "phases_bnhd_d128": t.check_phases("cpu", torch.float16, d=128, h=1, prefix=0, layout="BNHD", width=9),
           "routing": t.check_routing("cpu", torch.float16), "plan": t.check_plan("cpu"),
           "route": t.check_route("cpu")}}
    print(json.dumps(res))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@interpreter_kernels
def test_draft_kernel_under_triton_interpreter_on_cpu():
    res = run_interpreted(_SCRIPT.format(tests=str(REPO / "tests")), timeout=900)
    for key in ("prepass", "prepass_bf16", "prepass_ties8", "prepass_ties4", "prepass_ties4s"):
        assert all(n == 0 for n in res[key].values()), (key, res[key])
    assert_phases(res["phases"], torch.float16)
    assert_phases(res["phases_bnhd_d128"], torch.float16)
    assert res["routing"]["codes_differ"] == 0, res["routing"]
    assert res["routing"]["diff"] <= FLOOR[torch.float16], res["routing"]
    assert res["routing"]["empty_rows_zero"]
    assert res["plan"] == 0
    assert_route(res["route"])


def check_plan(device) -> int:
    """Entries where the Triton plan kernel differs from its torch reference, on random code maps."""
    from lowbit_video.kernels.draft_route import plan_from_codes, plan_reference

    g = torch.Generator().manual_seed(2)
    bad = 0
    for r in (3, 17, 40):
        codes = torch.tensor([0, 4, 8, 16])[torch.randint(0, 4, (2, 2, r, r), generator=g)].to(device)
        a, b = plan_from_codes(codes), plan_reference(codes)
        bad += int((a.idx != b.idx).sum() + (a.cnt != b.cnt).sum())
    return bad


def test_plan_lists_blocks_by_phase():
    """The lists the kernel walks: per query region, the NVFP4 blocks, then INT8, then 16-bit, each in
    column order, with their counts; skipped pairs are absent (torch reference of the Triton plan kernel,
    which the interpreter test compares with it)."""
    pytest.importorskip("triton")
    from lowbit_video.kernels.draft_route import plan_reference

    codes = torch.tensor([[[[16, 0, 4, 8], [0, 0, 0, 0], [4, 4, 16, 16], [8, 0, 8, 4]]]])
    plan = plan_reference(codes)
    assert plan.cnt[0].tolist() == [[1, 1, 1], [0, 0, 0], [2, 0, 2], [1, 2, 0]]
    assert plan.idx[0].tolist() == [[2, 3, 0, 0], [0, 0, 0, 0], [0, 1, 2, 3], [3, 0, 2, 0]]
    assert plan.density() == 10 / 16


def test_boundary_rule_equals_engine_allocation():
    """The rule the route kernels implement (`allocate_reference`: boundary score, then row-major rank among equal
    scores) == the engine's stable argsort, on scores with and without exact ties (runs across every boundary,
    zeros of both signs, few levels), for the recipes' quotas, empty and full quotas."""
    pytest.importorskip("triton")
    from lowbit_video.draft.alloc import allocate, head_quotas
    from lowbit_video.kernels.draft_route import allocate_reference

    g = torch.Generator().manual_seed(0)
    for i, spec in enumerate(route_specs()):
        for regions in (5, 12):
            quotas = head_quotas(regions, spec)
            maps = [tied_scores(3, regions, quotas, seed=i)]
            for levels in (3, 50, None):
                s = torch.rand(2, 3, regions, regions, generator=g, dtype=torch.float64)
                maps.append((s * levels).floor() / levels if levels else s)
            for s in maps:
                assert torch.equal(allocate_reference(s, quotas).long(), allocate(s, quotas)), (regions, spec)


# ------------------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_draft_prepass_bit_exact_on_gpu(dtype):
    for ties in (False, "int8", "nvfp4", "nvfp4-scale"):
        bad = check_prepass("cuda", dtype, d=128, ties=ties)
        assert all(n == 0 for n in bad.values()), (ties, bad)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype,layout,d,geo", [
    (torch.bfloat16, "BHND", 128, (3, 16, 12, 7)), (torch.float16, "BNHD", 64, (3, 16, 12, 7)),
    # regions of 45 real tokens (padded key slots masked) and an odd region count (a program's second
    # warpgroup without a region), no prefix
    (torch.bfloat16, "BHND", 128, (5, 9, 15, 0))])
def test_draft_kernel_matches_engine_on_gpu(dtype, layout, d, geo):
    frames, height, width, prefix = geo
    res = check_phases("cuda", dtype, d=d, b=2, h=3, frames=frames, height=height, width=width, prefix=prefix,
                       layout=layout)
    assert_phases(res, dtype)


@pytest.mark.gpu
@needs_cuda
def test_draft_routing_matches_engine_on_gpu():
    assert check_plan("cuda") == 0
    assert_route(check_route("cuda"))
    res = check_routing("cuda", torch.bfloat16, d=128)
    assert res["codes_differ"] == 0 and res["diff"] <= FLOOR[torch.bfloat16] and res["empty_rows_zero"], res


@pytest.mark.gpu
@needs_cuda
def test_draft_route_select_at_video_sizes_on_gpu():
    """The route kernels on maps the interpreter is too slow for: many select programs per head, two tiles per
    program (R = 1030, not a power of two), the dense counting of real levels; codes == the engine's `allocate`,
    lists == `plan_reference`, on tied (`tied_scores`) and on distinct random scores."""
    from lowbit_video.draft.alloc import allocate, head_quotas
    from lowbit_video.kernels.draft_route import plan_from_scores, plan_reference

    g = torch.Generator().manual_seed(7)
    for spec in route_specs()[:3]:
        for r in (300, 1030):
            quotas = head_quotas(r, spec)
            for s in (tied_scores(3, r, quotas, seed=r), torch.rand(1, 2, r, r, generator=g, dtype=torch.float64)):
                plan = plan_from_scores(s.cuda(), quotas)
                ref = plan_reference(plan.codes)
                assert torch.equal(plan.codes.cpu().long(), allocate(s, quotas)), (spec, r)
                assert torch.equal(plan.idx, ref.idx) and torch.equal(plan.cnt, ref.cnt), (spec, r)


def nvfp4_tile_inputs(tiles=24, seed=0):
    """P̃-like fp32 values ≤ 1 in (tiles·64, 64), blocks of 16 along a row with maxima chosen to reach every case
    of the per-block quantization: E4M3 scales in the normal range, subnormal ones, the least one rounded down
    by almost half a step (elements up to 9 steps: saturated at 6), scales that round to 0, all-zero blocks."""
    g = torch.Generator().manual_seed(seed)
    n = tiles * 64 * 4
    lo_t = torch.tensor([2.0**-6, 2.0**-9, 1.01 * 2.0**-10, 0.0, 0.0])
    hi_t = torch.tensor([1.0 / 6.0, 2.0**-6, 1.49 * 2.0**-9, 0.99 * 2.0**-10, 0.0])
    kind = torch.randint(0, 5, (n,), generator=g)
    t = lo_t[kind] + (hi_t[kind] - lo_t[kind]) * torch.rand(n, generator=g, dtype=torch.float64)
    amax = torch.where(kind == 0, torch.where(torch.rand(n, generator=g) < 0.3, 1.0, 6 * t), 6 * t).clamp(max=1.0)
    y = amax[:, None] * torch.rand(n, 16, generator=g, dtype=torch.float64)
    y[torch.arange(n), torch.randint(0, 16, (n,), generator=g)] = amax  # the block maximum itself
    return y.to(torch.float32).reshape(tiles * 64, 64)


def near_midpoints(y: torch.Tensor) -> torch.Tensor:
    """Elements where the kernel may round otherwise than float64 without error: its P̃ / s_b is P̃ times an
    fp32 reciprocal, and amax / 6 a product with fp32 1/6 (2^-21 relative covers both), so an element within
    that of an E2M1 midpoint, or a block whose amax / 6 is within it of an E4M3 midpoint, may land either side."""
    from lowbit_video.formats import e4m3, nvfp4

    y64 = y.double()
    blocks = y64.reshape(-1, 16)
    t = blocks.amax(-1) / 6
    lo, hi = e4m3.round_to_e4m3(t * (1 - 2.0**-21)), e4m3.round_to_e4m3(t * (1 + 2.0**-21))
    block_near = (lo != hi)[:, None].expand(-1, 16)
    sb = nvfp4.quantize(y64, block=16, axis=-1, outer_scale="none").block_scales.double().reshape(-1, 1)
    z = blocks / torch.where(sb > 0, sb, 1.0)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float64)
    elem_near = ((z[..., None] - mids).abs() <= 2.0**-21 * mids).any(-1) & (sb > 0)
    return (block_near | elem_near).reshape(y.shape)


@pytest.mark.gpu
@needs_cuda
def test_draft_kernel_nvfp4_p_quantization_on_gpu():
    """The Gluon draft kernel's per-16-key NVFP4 quantization of P̃ (draft_ws `_nvfp4_p`), run on tiles in the
    kernel's register layout, equals formats.nvfp4 (no outer scale) element by element, except where a value
    sits within fp32 rounding of a midpoint (`near_midpoints`, a handful at most); the inputs reach the
    saturated, subnormal-scale and zero-scale blocks (checked)."""
    from gluon_nvfp4_tile import nvfp4_p_tiles
    from lowbit_video.formats import nvfp4

    y = nvfp4_tile_inputs()
    p = torch.empty(y.shape, dtype=torch.float16, device="cuda")
    nvfp4_p_tiles[(y.shape[0] // 64,)](y.cuda(), p, num_warps=4)
    q = nvfp4.quantize(y.double(), block=16, axis=-1, outer_scale="none")
    ref = q.dequantize().double()
    sb = q.block_scales.double().reshape(-1, 1)
    z = (y.double().reshape(-1, 16) / torch.where(sb > 0, sb, 1.0))
    assert bool((z > 6.5).any()) and bool((sb == 0).any()) and bool(((sb > 0) & (sb < 2.0**-6)).any())
    near = near_midpoints(y)
    differ = p.cpu().double() != ref
    assert not bool((differ & ~near).any()), int((differ & ~near).sum())
    assert int(near.sum()) < 40, int(near.sum())


@pytest.mark.gpu
@needs_cuda
def test_attend_dispatches_draft_to_kernel_on_cuda():
    from lowbit_video.attention import attend
    from lowbit_video.draft.layout import VideoGeometry
    from lowbit_video.kernels.draft import draft_attention

    geo = VideoGeometry(2, 8, 12, prefix=4)
    q, k, v = make_qkv(geo, 1, 2, 64, dtype=torch.bfloat16, device="cuda", seed=9)
    out = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), "draftattention2", layout="BNHD", geometry=geo)
    assert torch.equal(out.transpose(1, 2), draft_attention(q, k, v, "draftattention2", geo))
    ref = attend(q, k, v, "draftattention2", geometry=geo, backend="reference")
    assert rel_l2(out.transpose(1, 2), ref) <= FLOOR[torch.bfloat16]
