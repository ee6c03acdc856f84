"""Where the time of sage2-int8's operand pre-pass goes: each of its two launches, and each launch's parts run as
launches of their own at the zoo shapes.

The pre-pass (kernels/prepass.py `sage_prepass`) runs two launches: Q's INT8 codes beside K's and V's token
statistics, then K's codes (after the mean, in per-thread groups) beside V's E4M3 codes. Here each part also runs
alone, on the same tensors: the statistics without Q's programs, Q's programs without the statistics, the K
programs of the second launch and its V programs, each half at the tilings given (K: rows per step × warps; V:
tokens per program × warps), every output compared with the pre-pass's own bit for bit. Each figure is the median
of triton.testing.do_bench (L2 flushed before every run, so inputs come from memory as in a model step), in µs,
beside the time of the copy of Q, K and V (reading them and writing as many bytes): a floor for a pass over them.

    python benchmarks/prepass_parts.py --shapes short ltx-video wan1.3b-480p
    python benchmarks/prepass_parts.py --shapes short --k-tiles 16x4 8x2 --v-tiles 16x2 32x4

Needs a CUDA device with triton.
"""

from __future__ import annotations

import argparse
import sys

# the pre-pass's jit functions the halves call, set by `_kernels` (a jit function finds what it calls among its
# module's globals; triton and the kernels are imported only there, so that the tests can load this script for its
# argument handling without them)
_k_thread_codes = _v_fp8 = None


def _kernels():
    """The halves of the second launch as kernels of their own (the pre-pass's own jit functions inside)."""
    import triton
    import triton.language as tl

    from lowbit_video.kernels import prepass

    globals().update(_k_thread_codes=prepass._k_thread_codes, _v_fp8=prepass._v_fp8)

    @triton.jit
    def k_codes(K, KMEAN, KC, KS, sk_b, sk_h, sk_n, sk_d, H, Nk, n_pad, D: tl.constexpr, ROWS: tl.constexpr,
                EMULATE_FMA: tl.constexpr):
        _k_thread_codes(K, KMEAN, KC, KS, sk_b, sk_h, sk_n, sk_d, H, Nk, n_pad, tl.program_id(0), tl.program_id(1), D,
                        ROWS, EMULATE_FMA)

    @triton.jit
    def v_codes(V, SV, VT, sv_b, sv_h, sv_n, sv_d, H, Nk, n_pad, D: tl.constexpr, TB: tl.constexpr,
                OPERAND_ORDER: tl.constexpr, EMULATE_FMA: tl.constexpr):
        _v_fp8(V, SV, VT, sv_b, sv_h, sv_n, sv_d, H, Nk, n_pad, tl.program_id(0), tl.program_id(1), D, TB,
               OPERAND_ORDER, EMULATE_FMA)

    return k_codes, v_codes


def parse_tiles(text: str) -> tuple[int, int]:
    """`AxW` (rows or tokens per program × warps) as two ints; ValueError with a one-line reason."""
    a, sep, w = text.partition("x")
    if not sep or not a.isdigit() or not w.isdigit() or int(a) not in (8, 16, 32, 64, 128) or int(w) not in (1, 2, 4, 8):
        raise ValueError(f"tiles {text!r}: expected AxW with A one of 8, 16, 32, 64, 128 and W one of 1, 2, 4, 8")
    return int(a), int(w)


def do_bench_us(fn) -> float:
    """The median of triton.testing.do_bench (L2 flushed before each run), µs."""
    from triton.testing import do_bench

    return do_bench(fn, warmup=5, rep=40, return_mode="median") * 1e3


def measure(H: int, N: int, D: int, k_tiles, v_tiles, device: str = "cuda",
            us=do_bench_us) -> list[tuple[str, float, bool]]:
    """(part, µs by `us`, equal to the pre-pass's own output) for bf16 BHND inputs (1, H, N, D) on `device`."""
    import torch
    import triton

    from lowbit_video.kernels import prepass as P

    g = torch.Generator(device=device).manual_seed(0)
    base = torch.randn(1, H, 1, D, device=device, generator=g)  # a shared channel offset: smoothing has work to do
    q, k, v = ((base + 0.5 * torch.randn(1, H, N, D, device=device, generator=g)).to(torch.bfloat16) for _ in range(3))
    qc, qs, kc, ks, vt, sv = P.sage_prepass(q, k, v, "BHND", operand_order=True)
    kmean = P.token_mean64(k, "BHND")
    st = P._bhnd_strides(k, "BHND")
    pad = triton.cdiv(N, P.TILE) * P.TILE
    rows, tb = P.SAGE_TILES.get(D, P.SAGE_TILES[128])
    rrows, rtiles = P.TOKEN_REDUCE
    chunks = triton.cdiv(N, rrows * rtiles)
    out = [("pre-pass", us(lambda: P.sage_prepass(q, k, v, "BHND", operand_order=True)), True),
           ("copy of Q, K, V", us(lambda: (q.clone(), k.clone(), v.clone())), True)]

    qc2, qs2 = torch.empty_like(qc), torch.empty_like(qs)
    kpart = torch.empty((chunks, H, D), device=device, dtype=torch.float64)
    vpart = torch.empty((chunks, H, D), device=device, dtype=torch.float32)
    count = torch.zeros((H,), device=device, dtype=torch.int32)
    km2, sv2 = torch.empty_like(kmean), torch.empty_like(sv)
    n_q = pad // rows
    for label, nq, ng in (("1: Q codes + statistics", n_q, chunks), ("1: statistics alone", 0, chunks),
                          ("1: Q codes alone", n_q, 0)):
        def first(nq=nq, ng=ng):
            P._sage_q_and_stats_kernel[(nq + ng, H)](
                q, k, v, qc2, qs2, kpart, vpart, count, km2, sv2, *st, *st, *st, H, N, N, pad, H, nq, D=D, ROWS=rows,
                RROWS=rrows, RTILES=rtiles, EMULATE_FMA=P.EMULATE_FMA, num_warps=P.SAGE_WARPS)
        first()
        # (the mean's summation order is the pre-pass's own here, torch's in token_mean64: equal to fp64 rounding)
        same = ((not ng or (torch.equal(sv2, sv) and torch.allclose(km2, kmean, rtol=1e-12, atol=0)))
                and (not nq or (torch.equal(qc2, qc) and torch.equal(qs2, qs))))
        out.append((label, us(first), same))
    kmean = km2  # the mean the pre-pass's second launch reads (its codes are the pre-pass's bit for bit)

    kc2, ks2, vt2 = torch.empty_like(kc), torch.empty_like(ks), torch.empty_like(vt).view(torch.uint8)

    def second():
        P._sage_kv_codes_kernel[(pad // P.TILE + pad // tb, H)](
            k, v, kmean, sv, kc2, ks2, vt2, *st, *st, H, N, pad, pad // P.TILE, D=D, ROWS=rows, TB=tb,
            OPERAND_ORDER=True, EMULATE_FMA=P.EMULATE_FMA, num_warps=P.SAGE_WARPS)
    second()
    out.append((f"2: K and V codes ({rows} rows, {tb} tokens, {P.SAGE_WARPS} warps)", us(second),
                torch.equal(kc2, kc) and torch.equal(ks2, ks) and torch.equal(vt2, vt.view(torch.uint8))))
    k_codes, v_codes = _kernels()
    for r, w in k_tiles:
        def k_half(r=r, w=w):
            k_codes[(pad // P.TILE, H)](k, kmean, kc2, ks2, *st, H, N, pad, D=D, ROWS=r, EMULATE_FMA=P.EMULATE_FMA,
                                        num_warps=w)
        kc2.zero_()
        k_half()
        out.append((f"2: K codes alone, {r} rows x {w} warps", us(k_half),
                    torch.equal(kc2, kc) and torch.equal(ks2, ks)))
    for t, w in v_tiles:
        def v_half(t=t, w=w):
            v_codes[(pad // t, H)](v, sv, vt2, *st, H, N, pad, D=D, TB=t, OPERAND_ORDER=True,
                                   EMULATE_FMA=P.EMULATE_FMA, num_warps=w)
        vt2.zero_()
        v_half()
        out.append((f"2: V codes alone, {t} tokens x {w} warps", us(v_half), torch.equal(vt2, vt.view(torch.uint8))))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=["short", "ltx-video", "wan1.3b-480p"], help="zoo shape names")
    ap.add_argument("--k-tiles", nargs="+", default=["16x4", "32x4", "16x2"],
                    help="K's programs alone: rows per step x warps (default: %(default)s)")
    ap.add_argument("--v-tiles", nargs="+", default=["16x4", "32x4", "16x2", "32x2"],
                    help="V's programs alone: tokens per program x warps (default: %(default)s)")
    args = ap.parse_args(argv)
    from lowbit_video.bench.common import SHAPES, shape_name

    try:
        shapes = [SHAPES[shape_name(s)] for s in args.shapes]
        k_tiles = [parse_tiles(t) for t in args.k_tiles]
        v_tiles = [parse_tiles(t) for t in args.v_tiles]
    except KeyError as exc:
        print(f"error: unknown shape {exc}; the zoo's: {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("error: prepass_parts.py needs a CUDA GPU (none is visible)", file=sys.stderr)
        return 2
    for sh in shapes:
        print(f"{sh.name} (B·H={sh.batch * sh.heads}, N={sh.tokens}, D={sh.head_dim}), µs:", flush=True)
        for part, t, same in measure(sh.batch * sh.heads, sh.tokens, sh.head_dim, k_tiles, v_tiles):
            print(f"  {part:48s} {t:8.1f}{'' if same else '  (output differs from the pre-pass)'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
