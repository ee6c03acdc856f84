"""Offline SASS of attn_fwd for sm_90 (no GPU needed): compile with Triton 3.6 (the H200 image's version) for
cuda:90 with the launch's specializations (pointer and stride divisibility 16, unit strides as constants),
then histogram the instructions of the longest loops (the key loop) from `cuobjdump --dump-sass`.
This produced the per-tile instruction counts in results/kernels-h200.md (session 5).

Usage (a Triton 3.6 environment; torch is not needed):
    python3.11 -m venv /tmp/t36 && /tmp/t36/bin/pip install triton==3.6.0
    /tmp/t36/bin/python results/scripts/sass_key_loop.py MODE [KEY=VALUE ...]
e.g. `... 1` (mxattention's defaults), `... 1 PQ=False`, `... 2 BLOCK_M=64 num_warps=4 NUM_STAGES=3 PIPE=False
P_SHIFT=8.807354857564112 QMAX=6.0 PNQ=False` (sage2-int8), `... 3 SMQ=2 ROTV=True P_FP8=False P_SHIFT=0.0
PNQ=False NUM_STAGES=3` (rotateattention-half; `QK=fp8` with its Q/K codes as E4M3)."""

import collections
import os
import re
import subprocess
import sys
import unittest.mock

sys.modules.setdefault("torch", unittest.mock.MagicMock())  # kernels/ imports torch at module level only
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from kernels._core import attn_fwd  # noqa: E402


def compile_attn(mode: int, overrides: dict):
    names = attn_fwd.arg_names
    ptr = {"Q": "*fp8e4nv", "K": "*fp8e4nv", "VT": "*fp8e4nv", "O": "*bf16", "QS": "*i32", "KS": "*i32", "VS": "*i32",
           "KPM": "*i8", "BAD": "*i32", "KF": "*fp32", "QM": "*fp32", "HV": "*fp32"}
    if mode == 2:
        ptr.update(Q="*i8", K="*i8", QS="*fp32", KS="*fp32", VS="*fp32")
    if mode == 3:
        # QK=fp8: the INT4 codes of Q and K as E4M3 (config QK_FP8)
        qk = "*fp8e4nv" if overrides.pop("QK", "") == "fp8" else "*i8"
        ptr.update(Q=qk, K=qk, VT="*i8", QS="*fp32", KS="*fp32", VS="*fp32")
    const = dict(MODE=mode, HEAD_DIM=128, HAS_KPM=False, PNQ=True, P_FP8=True, RULE=2, FLQ=2, QMAX=7.25, P_SHIFT=8.0,
                 PROMOTE=True, PQ=True, BLOCK_M=128, BLOCK_N=128, NUM_STAGES=4, PLEV=15, SMQ=0, ROTV=False, PROW=False,
                 PIPE=True, WS=False, TMA=False, sv_n=1, so_d=1)  # strides equal to 1 are specialized as constants
    warps, opts = 8, {}
    for k, v in overrides.items():
        if k == "num_warps":
            warps = int(v)
        elif k == "maxnreg":  # a compile option (.maxnreg), not a constexpr
            opts["maxnreg"] = int(v)
        else:
            const[k] = eval(v)
    sig = {}
    for n in names:
        sig[n] = ("constexpr" if n in const else ptr.get(n) or
                  ("fp32" if n in ("sm_scale_log2", "rotv_scale") else "i32"))
    not16 = {"sqs_bh", "sks_bh", "H", "sm_scale_log2", "rotv_scale"}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if sig[n] != "constexpr" and n not in not16}
    src = ASTSource(fn=attn_fwd, signature=sig, constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps,
                                                                             num_stages=const["NUM_STAGES"], **opts))


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


def loops(sass: str, top: int = 2):
    """(instructions, histogram) of the `top` longest backward-branch loops."""
    ins, found = loop_spans(sass)
    out = []
    for n, s, e in found[:top]:
        h = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for _, t in ins[s:e + 1])
        out.append((n, h))
    return out


def sass_of(kernel, path="/tmp/attn_fwd.cubin"):
    """(SASS text, "REG:n STACK:n shared n") of a compiled kernel, through the cuobjdump Triton ships."""
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with open(path, "wb") as f:
        f.write(kernel.asm["cubin"])
    sass = subprocess.run([os.path.join(bindir, "cuobjdump"), "--dump-sass", path],
                          capture_output=True, text=True, check=True).stdout
    res = subprocess.run([os.path.join(bindir, "cuobjdump"), "--dump-resource-usage", path],
                         capture_output=True, text=True, check=True).stdout
    return sass, " ".join(re.findall(r"(REG:\d+|STACK:\d+)", res)) + f" shared {kernel.metadata.shared}"


if __name__ == "__main__":
    mode = int(sys.argv[1])
    sass, usage = sass_of(compile_attn(mode, dict(a.split("=", 1) for a in sys.argv[2:])))
    print(usage)
    for n, h in loops(sass):
        print(f"loop: {n} instructions; " + ", ".join(f"{k} {v}" for k, v in h.most_common(20)))
