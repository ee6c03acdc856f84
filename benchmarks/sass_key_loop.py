"""Instruction counts of an attention kernel's key loop, from an offline sm_90 compile (no GPU needed).

Compiles the Triton kernel (kernels/_core.py `attn_fwd`) or the warp-specialized Gluon kernel
(kernels/gluon_ws.py `attn_ws_fwd`) for cuda:90 with the specializations the launcher gives it (pointer and
stride divisibility 16, unit strides as constants), disassembles it with the `cuobjdump` Triton ships, and prints
the registers / stack / shared memory and the instruction histogram of the key loop (Triton: the two longest
backward-branch loops, the whole-tile key loop and the masked tail's; Gluon: the consumers' loops that issue a
wgmma and one exp2 per score). These counts are the "where the time goes" figures of results/kernels-h200.md:
the 8-bit kernels are issue-bound, so fewer instructions per key tile is what makes a kernel faster.

Needs triton (3.6 for the H200 figures) on Linux x86-64; torch is not needed (it is stubbed out).

Examples, with the launcher's default settings at head_dim 128 (MODE: 0 dense, 1 MXFP4, 2 sage2-int8, 3 INT4,
4 NVFP4; the Gluon kernel has modes 1-3):
    python benchmarks/sass_key_loop.py gluon 2 STAGES=3 EARLY=True WORK_LOOP=True             # sage2-int8
    python benchmarks/sass_key_loop.py gluon 1 STAGES=4 QMAX=7.25 EARLY=True WORK_LOOP=True   # mxattention
    python benchmarks/sass_key_loop.py gluon 1 STAGES=4 RULE=0 PNQ=False                      # mxfp4-ocp
    python benchmarks/sass_key_loop.py gluon 3 STAGES=3 P_SHIFT=0 QK=fp8 EARLY=True WORK_LOOP=True  # rotateattention-half
    python benchmarks/sass_key_loop.py triton 1                # mxattention on the Triton kernel (PQ=False: no P quantization)
    python benchmarks/sass_key_loop.py triton 3 SMQ=2 ROTV=True P_FP8=False P_SHIFT=0.0 PNQ=False NUM_STAGES=3 QK=fp8
    python benchmarks/sass_key_loop.py draft                   # DraftAttention2's Gluon kernel (kernels/draft_ws.py)
    python benchmarks/sass_key_loop.py prepass sage-kv D=64    # sage2's pre-pass: K's and V's codes (every loop)
    python benchmarks/sass_key_loop.py prepass sage-stats      # sage2's pre-pass: Q's codes with K's and V's statistics

For a pre-pass launch it prints every loop (a K program of `sage-kv` runs its two, the block's maxima and then its
codes, TILE / ROWS times each; its V programs have none) and the static instruction count of the whole kernel.

The draft kernel's consumers have one key loop per phase (and each warpgroup its own copy): with bf16 inputs at
head_dim 128, the 16-bit and prefix loops are the shortest, then INT8/FP8 (IGMMA, I2FP), then NVFP4 (the
per-16-key P̃ quantization: VIMNMX, LOP3 per score).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from typing import NamedTuple

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _value(raw: str):
    """A KEY=VALUE setting's value as the kernel's constexpr: bool, int, float or the string."""
    if raw in ("True", "False", "true", "false"):
        return raw.lower() == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def _import_kernels():
    """The repository's kernels/ folder as the package `lowbit_kernels`, with torch stubbed out (kernels/ needs
    torch only at call time; its own package name, lowbit_video.kernels, would import lowbit_video and torch)."""
    import importlib.util
    import unittest.mock

    if "lowbit_kernels" in sys.modules:
        return sys.modules["lowbit_kernels"]
    sys.modules.setdefault("torch", unittest.mock.MagicMock())
    folder = os.path.join(REPO, "kernels")
    spec = importlib.util.spec_from_file_location("lowbit_kernels", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    package = importlib.util.module_from_spec(spec)
    sys.modules["lowbit_kernels"] = package
    spec.loader.exec_module(package)
    return package


def _constexprs(kernel, defaults: dict, over: dict) -> dict:
    """The kernel's specialized arguments: `defaults` (those the kernel does not have are dropped), then the
    caller's overrides `over` (an unknown name is an error), then each remaining constexpr's own default."""
    unknown = sorted(set(over) - set(kernel.arg_names))
    if unknown:
        raise SystemExit(f"error: {kernel.__name__} has no argument {', '.join(unknown)}; its constexprs: "
                         + ", ".join(p.name for p in kernel.params if p.is_constexpr))
    out = {k: v for k, v in defaults.items() if k in kernel.arg_names}
    out.update(over)
    for p in kernel.params:
        if p.is_constexpr and p.name not in out and p.has_default:
            out[p.name] = p.default
    return out


def compile_triton(mode: int, over: dict):
    """The Triton kernel attn_fwd for sm_90; `over`: constexpr overrides, num_warps, maxnreg, QK=fp8."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    _import_kernels()
    from lowbit_kernels._core import attn_fwd

    names = attn_fwd.arg_names
    ptr = {"Q": "*fp8e4nv", "K": "*fp8e4nv", "VT": "*fp8e4nv", "O": "*bf16", "QS": "*i32", "KS": "*i32", "VS": "*i32",
           "KPM": "*i8", "BAD": "*i32", "KF": "*fp32", "QM": "*fp32", "HV": "*fp32", "LSE": "*fp32"}
    qk_fp8 = over.pop("QK", "") == "fp8"  # the INT4 codes of Q and K as E4M3 (config QK_FP8)
    if mode == 2:
        ptr.update(Q="*i8", K="*i8", QS="*fp32", KS="*fp32", VS="*fp32")
    if mode == 3:
        qk = "*fp8e4nv" if qk_fp8 else "*i8"
        ptr.update(Q=qk, K=qk, VT="*i8", QS="*fp32", KS="*fp32", VS="*fp32")
    if mode == 4:  # NVFP4: E2M1 values times their block scale, exact in fp16
        ptr.update(Q="*fp16", K="*fp16", VT="*fp16", QS="*fp32", KS="*fp32", VS="*fp32")
    if mode == 0:  # dense: 16-bit operands
        ptr.update(Q="*bf16", K="*bf16", VT="*bf16")
    # P_FP8: the 8-bit modes' P̂·V̂ is E4M3; dense and NVFP4 (modes 0, 4) run it in 16 bits, as the launcher does
    const = dict(MODE=mode, HEAD_DIM=128, HAS_KPM=False, PNQ=True, P_FP8=mode in (1, 2, 3),
                 RULE=2, FLQ=2, QMAX=7.25, P_SHIFT=8.0,
                 PROMOTE=True, PQ=True, BLOCK_M=128, BLOCK_N=128, NUM_STAGES=4, PLEV=15, SMQ=0, ROTV=False, PROW=False,
                 PIPE=True, sv_n=1, so_d=1)  # strides equal to 1 are specialized as constants
    warps, opts = int(over.pop("num_warps", 8)), {}
    if "maxnreg" in over:  # a compile option (.maxnreg), not a constexpr
        opts["maxnreg"] = int(over.pop("maxnreg"))
    const = _constexprs(attn_fwd, const, over)
    sig = {n: "constexpr" if n in const else ptr.get(n) or ("fp32" if n in ("sm_scale_log2", "rotv_scale") else "i32")
           for n in names}
    not16 = {"sqs_bh", "sks_bh", "H", "sm_scale_log2", "rotv_scale"}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if sig[n] != "constexpr" and n not in not16}
    src = ASTSource(fn=attn_fwd, signature=sig, constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=warps, num_stages=const.get("NUM_STAGES", 3), **opts))


def _descriptor_type(block, layout, dtype):
    """The signature string of a TMA descriptor argument with this block, shared layout and torch dtype name."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    class FakeTensor:  # what TensorDescriptor reads off a torch tensor
        def data_ptr(self):
            return 1024

    FakeTensor.dtype = dtype
    return mangle_type(TensorDescriptor(FakeTensor(), [1 << 20, block[1]], [block[1], 1], block, layout))


def compile_gluon(mode: int, over: dict):
    """The warp-specialized Gluon kernel attn_ws_fwd for sm_90; `over`: constexpr overrides, D, STAGES, QK=fp8."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    _import_kernels()
    from lowbit_kernels.gluon_ws import KS_LAYOUT, attn_ws_fwd

    D, stages = int(over.pop("D", 128)), int(over.pop("STAGES", 2))
    qk_fp8 = over.pop("QK", "") == "fp8"
    const = dict(STAGES=stages, MODE=mode, RULE=2 if mode == 1 else 0, FLQ=2, QMAX=6.0, PNQ=mode == 1,
                 DEFER=True, EARLY=False, PLEV=15.0, SMQ=2 if mode == 3 else 0, WORK_LOOP=False,
                 num_warps=4)
    const = _constexprs(attn_ws_fwd, const, over)
    qk = gl.float8e4nv if mode == 1 or qk_fp8 else gl.int8
    lay = gl.NVMMASharedLayout.get_default_for
    sc, vs = ("*i32", "*i32") if mode == 1 else ("*fp32", "*fp32")
    tq = "torch.float8_e4m3fn" if qk == gl.float8e4nv else "torch.int8"
    sig = {"q_desc": _descriptor_type([64, D], lay([64, D], qk), tq),
           "k_desc": _descriptor_type([128, D], lay([128, D], qk), tq),
           "v_desc": (_descriptor_type([D, 128], lay([D, 128], gl.int8), "torch.int8") if mode == 3 else
                      _descriptor_type([D, 128], lay([D, 128], gl.float8e4nv), "torch.float8_e4m3fn")),
           "QS": sc, "KS": sc, "VS": vs, "O": "*bf16",
           "ks_desc": (_descriptor_type([1, 128], KS_LAYOUT, "torch.float32") if mode in (2, 3)
                       else _descriptor_type([128, D], lay([128, D], qk), tq)),
           "ds_desc": (_descriptor_type([1, 128], KS_LAYOUT, "torch.float32") if mode == 3 and const["SMQ"] == 2
                       else _descriptor_type([128, D], lay([128, D], qk), tq)),
           "BAD": "*i32", "LSE": "*fp32", "TR": "*i64", "c": "fp32", "P_SHIFT": "fp32"}
    names = attn_ws_fwd.arg_names
    for n in names:
        sig.setdefault(n, "constexpr" if n in const else "i32")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("QS", "KS", "VS", "O") if n in names}
    src = GluonASTSource(fn=attn_ws_fwd, signature={n: sig[n] for n in names},
                         constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


def compile_draft(over: dict):
    """The block-sparse Gluon kernel draft_ws_fwd for sm_90; `over`: D (128), STAGES (2), DT (bfloat16: the 16-bit
    phase's input dtype), WRITE_LSE."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    _import_kernels()
    from lowbit_kernels.draft_ws import BLOCK, draft_ws_fwd

    D, stages, dt = int(over.pop("D", 128)), int(over.pop("STAGES", 2)), str(over.pop("DT", "bfloat16"))
    const = _constexprs(draft_ws_fwd, dict(STAGES=stages, num_warps=4), over)
    lay = gl.NVMMASharedLayout.get_default_for
    b = BLOCK.value

    def rows(gdt, name):
        return _descriptor_type([b, D], lay([b, D], gdt), f"torch.{name}")

    def cols(gdt, name):
        return _descriptor_type([D, b], lay([D, b], gdt), f"torch.{name}")

    g16 = getattr(gl, dt)
    sig = dict(q4d=rows(gl.float16, "float16"), q8d=rows(gl.int8, "int8"), q16d=rows(g16, dt),
               k4d=rows(gl.float16, "float16"), k8d=rows(gl.int8, "int8"), k16d=rows(g16, dt),
               v4d=cols(gl.float16, "float16"), v8d=cols(gl.float8e4nv, "float8_e4m3fn"), v16d=rows(g16, dt),
               pkd=rows(g16, dt), pvd=rows(g16, dt), IDX="*i32", CNT="*i32", COUNTS="*i32", QS8="*fp32",
               KS8="*fp32", VS8="*fp32", S4="*fp32", GATHER="*i32", O="*bf16", LSE="*fp32", c="fp32",
               p8_shift="fp32")
    names = draft_ws_fwd.arg_names
    for n in names:
        sig.setdefault(n, "constexpr" if n in const else "i32")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("IDX", "CNT", "COUNTS", "QS8", "KS8", "VS8",
                                                                    "S4", "GATHER", "O", "so_b", "so_h", "so_n")}
    src = GluonASTSource(fn=draft_ws_fwd, signature={n: sig[n] for n in names},
                         constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


# the sage2 pre-pass's two launches: (kernel in kernels/prepass.py, pointer arguments' types, constexprs besides
# D and the tiles)
PREPASS = {
    "sage-stats": ("_sage_q_and_stats_kernel",
                   dict(Q="*bf16", K="*bf16", V="*bf16", QC="*i8", QS="*fp32", KPART="*fp64", VPART="*fp32",
                        COUNT="*i32", KMEAN="*fp64", SV="*fp32"),
                   dict(EMULATE_FMA=False, sq_d=1, sk_d=1, sv_d=1)),
    "sage-kv": ("_sage_kv_codes_kernel",
                dict(K="*bf16", V="*bf16", KMEAN="*fp64", SV="*fp32", KC="*i8", KS="*fp32", VT="*u8"),
                dict(OPERAND_ORDER=True, EMULATE_FMA=False, sk_d=1, sv_d=1)),
}


def compile_prepass(launch: str, over: dict):
    """A sage2 pre-pass launch (`PREPASS`) for sm_90 with bf16 inputs, as the launcher specializes it (unit
    channel strides as constants, pointers and other strides divisible by 16); `over`: D (128) and constexpr
    overrides (ROWS, TB, ...) of prepass.SAGE_TILES' tiles for D."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    _import_kernels()
    from lowbit_kernels import prepass

    name, ptrs, const = PREPASS[launch]
    fn = getattr(prepass, name)
    D = int(over.pop("D", 128))
    rows, tb = prepass.SAGE_TILES[D]
    rrows, rtiles = prepass.TOKEN_REDUCE
    tiles = dict(ROWS=rows, TB=tb, RROWS=rrows, RTILES=rtiles)
    const = _constexprs(fn, dict(const, D=D, **tiles), over)
    names = fn.arg_names
    sig = {n: "constexpr" if n in const else ptrs.get(n, "i32") for n in names}
    # pointers, strides and the padded lengths (multiples of TILE) are divisible by 16; head and token counts may not be
    aligned = [n for n in names if sig[n] != "constexpr" and (sig[n].startswith("*") or re.fullmatch(r"s\w_[bhnd]", n)
                                                              or n in ("n_pad", "pad_q"))]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=fn, signature=sig, constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=prepass.SAGE_WARPS))


def sass_of(kernel, path: str):
    """(SASS text, "REG:n STACK:n shared n") of a compiled kernel, through the cuobjdump Triton ships."""
    import triton

    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with open(path, "wb") as f:
        f.write(kernel.asm["cubin"])
    sass = subprocess.run([os.path.join(bindir, "cuobjdump"), "--dump-sass", path],
                          capture_output=True, text=True, check=True).stdout
    res = subprocess.run([os.path.join(bindir, "cuobjdump"), "--dump-resource-usage", path],
                         capture_output=True, text=True, check=True).stdout
    return sass, " ".join(re.findall(r"(REG:\d+|STACK:\d+)", res)) + f" shared {kernel.metadata.shared}"


def loop_spans(sass: str):
    """(instructions [(address, text)], [(length, first, last)] of every backward-branch loop, longest first)."""
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    at = {a: i for i, (a, _) in enumerate(ins)}
    found = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"BRA\s.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            found.append((i - at[int(m.group(1), 16)] + 1, at[int(m.group(1), 16)], i))
    return ins, sorted(found, reverse=True)


def histogram(ins, first: int, last: int) -> collections.Counter:
    """Opcode counts (predicates and modifiers stripped) of instructions first..last."""
    return collections.Counter(_unpredicated(t).split()[0].split(".")[0] for _, t in ins[first:last + 1])


def _unpredicated(text: str) -> str:
    """An instruction's text without its guard predicate (`@P0 `, `@!UP1 `)."""
    return re.sub(r"^@!?U?P\w+\s+", "", text)


def mufu_spacing(texts) -> dict:
    """How close together a loop's MUFU instructions (exp2 and the other special functions) come, from its
    instruction texts in order: the longest run of consecutive MUFUs, the most MUFUs in any 16 consecutive
    instructions, and how many successive MUFUs are at most 2 instructions apart (of how many pairs). The MUFU
    unit takes a warp's instruction every few cycles, so a run of them stalls the warp where ALU work could have
    been interleaved: in the key-loop builds measured against each other, the one with the longer runs was the
    slower one, even with fewer instructions (kernels/README.md, "Tried and lost")."""
    mufu = [_unpredicated(t).startswith("MUFU") for t in texts]
    at = [i for i, m in enumerate(mufu) if m]
    longest = run = 0
    for m in mufu:
        run = run + 1 if m else 0
        longest = max(longest, run)
    most = max((sum(1 for j in at if a <= j < a + 16) for a in at), default=0)  # windows opening at a MUFU
    close = sum(1 for a, b in zip(at, at[1:]) if b - a <= 2)
    return {"longest_run": longest, "most_in_16": most, "close_pairs": close, "pairs": max(len(at) - 1, 0)}


class Loop(NamedTuple):
    length: int
    ops: collections.Counter  # opcode counts (`histogram`)
    texts: list  # the instructions in order


def key_loops(sass: str, kernel: str) -> list[Loop]:
    """The key loop(s) of the kernel's SASS."""
    ins, found = loop_spans(sass)

    def loop(n, a, b):
        return Loop(n, histogram(ins, a, b), [t for _, t in ins[a:b + 1]])

    if kernel == "triton":  # the two longest loops: the key loop (and its peeled copy when there is one)
        return [loop(n, a, b) for n, a, b in found[:2]]
    if kernel == "draft":  # the innermost loops that issue a wgmma and one exp2 per score of a 64×64 tile
        inner = [(n, a, b) for n, a, b in found
                 if not any(a <= a2 and b2 <= b and (a2, b2) != (a, b) for _, a2, b2 in found)]
        loops = [loop(n, a, b) for n, a, b in inner]
        loops = [x for x in loops if (x.ops["HGMMA"] or x.ops["IGMMA"] or x.ops["QGMMA"]) and x.ops["MUFU"] >= 32]
        return sorted(loops, key=lambda x: x.length)
    loops = [loop(n, a, b) for n, a, b in found]
    # Gluon: the shortest loops that issue a wgmma and one exp2 per score (>= 60 MUFU): the consumers' key loops
    loops = [x for x in loops if (x.ops["QGMMA"] or x.ops["IGMMA"]) and x.ops["MUFU"] >= 60]
    return sorted(loops, key=lambda x: x.length)[:2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", choices=("triton", "gluon", "draft", "prepass"),
                    help="kernels/_core.py attn_fwd, kernels/gluon_ws.py attn_ws_fwd, kernels/draft_ws.py draft_ws_fwd "
                         "or a launch of the sage2 pre-pass (kernels/prepass.py)")
    ap.add_argument("mode", nargs="?",
                    help="0 dense, 1 MXFP4, 2 sage2-int8, 3 INT4, 4 NVFP4 (triton and gluon; draft has none); "
                         "for prepass the launch: " + " or ".join(PREPASS))
    ap.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                    help="constexpr overrides (e.g. PQ=False NUM_STAGES=3), num_warps=N, maxnreg=N (Triton), "
                         "D=64 / STAGES=3 (Gluon), QK=fp8 (INT4 Q/K codes as E4M3)")
    ap.add_argument("--cubin", default="/tmp/sass_key_loop.cubin", help="where to write the compiled cubin")
    args = ap.parse_args(argv)
    if args.mode is not None and "=" in args.mode:  # the draft kernel has no mode: its first setting landed here
        args.settings.insert(0, args.mode)
        args.mode = None
    if args.kernel == "prepass":
        if args.mode not in PREPASS:
            ap.error(f"the pre-pass launch is one of {', '.join(PREPASS)}, got {args.mode!r}")
    elif args.mode is not None:
        if args.mode not in ("0", "1", "2", "3", "4"):
            ap.error(f"mode is one of 0, 1, 2, 3, 4, got {args.mode!r}")
        args.mode = int(args.mode)
    over = {}
    for item in args.settings:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            ap.error(f"settings are KEY=VALUE, got {item!r}")
        over[key] = raw if key == "QK" else _value(raw)
    if args.kernel != "draft" and args.mode is None:
        ap.error(f"the {args.kernel} kernel needs a mode")
    if args.kernel == "gluon" and args.mode not in (1, 2, 3):
        ap.error("the Gluon kernel has modes 1 (MXFP4), 2 (sage2-int8) and 3 (INT4)")
    try:
        import triton  # noqa: F401
    except ImportError:
        print("error: triton is not installed (pip install triton==3.6.0)", file=sys.stderr)
        return 2
    if args.kernel == "prepass":
        kernel = compile_prepass(args.mode, over)
        sass, usage = sass_of(kernel, args.cubin)
        ins, loops = loop_spans(sass)
        print(f"{usage}; {len(ins)} instructions")
        for n, a, b in sorted(loops, key=lambda x: x[1]):  # in program order
            print(f"loop: {n} instructions; " + ", ".join(f"{k} {v}" for k, v in histogram(ins, a, b).most_common(12)))
        return 0
    if args.kernel == "draft":
        kernel = compile_draft(over)
    else:
        kernel = (compile_triton if args.kernel == "triton" else compile_gluon)(args.mode, over)
    sass, usage = sass_of(kernel, args.cubin)
    print(usage)
    label = "loop" if args.kernel == "triton" else "key loop"  # Triton: the key loop and its masked tail copy
    for n, h, texts in key_loops(sass, args.kernel):
        print(f"{label}: {n} instructions; " + ", ".join(f"{k} {v}" for k, v in h.most_common(40)))
        sp = mufu_spacing(texts)
        print(f"  MUFU spacing: longest run {sp['longest_run']}, at most {sp['most_in_16']} in any 16 instructions, "
              f"{sp['close_pairs']} of {sp['pairs']} successive pairs within 2 instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
