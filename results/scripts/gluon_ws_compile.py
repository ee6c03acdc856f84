"""Offline sm_90 compile of the warp-specialized Gluon kernel (kernels/gluon_ws.py) with Triton 3.6, no GPU:
registers and spills per partition, shared memory, and the consumers' key-loop instruction counts.

    /tmp/t36/bin/python results/scripts/gluon_ws_compile.py MODE [KEY=VALUE ...]
e.g. `... 1` (mxattention: UOS, PNQ), `... 1 RULE=0 PNQ=False` (mxfp4-ocp), `... 2` (sage2-int8), `... 3 STAGES=3
P_SHIFT=0` (INT4: rotateattention-half, ΔS table; `SMQ=0` without Q smoothing; `QK=fp8` its codes as E4M3);
D=64, STAGES=3.
"""
import collections
import os
import re
import sys
import unittest.mock

sys.modules.setdefault("torch", unittest.mock.MagicMock())  # kernels/ imports torch at module level only
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

here = os.path.dirname(__file__)
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", ".."))
from gluon_compile import _mangled  # noqa: E402
from sass_key_loop import loop_spans, sass_of  # noqa: E402

from kernels.gluon_ws import KS_LAYOUT, attn_ws_fwd  # noqa: E402


def compile_ws(mode: int, over: dict):
    D, stages = int(over.pop("D", 128)), int(over.pop("STAGES", 2))
    qmax = float(over.pop("QMAX", 6.0))
    plev = float(over.pop("PLEV", 15.0))
    qk_fp8 = over.pop("QK", "") == "fp8"
    const = dict(STAGES=stages, MODE=mode, RULE=2 if mode == 1 else 0, FLQ=2, QMAX=qmax,
                 PNQ=mode == 1, NWG=2, DEFER=True, EARLY=False, PINGPONG=False, PLEV=plev, SMQ=2 if mode == 3 else 0,
                 WORK_LOOP=False,
                 num_warps=4)
    const.update({k: (v == "True" if v in ("True", "False") else int(v)) for k, v in over.items()})
    # QK=fp8: MODE 3's INT4 codes as E4M3 (config QK_FP8)
    qk = gl.float8e4nv if mode == 1 or qk_fp8 else gl.int8
    lay = gl.NVMMASharedLayout.get_default_for
    sc, vs = ("*i32", "*i32") if mode == 1 else ("*fp32", "*fp32")
    tq = "torch.float8_e4m3fn" if qk == gl.float8e4nv else "torch.int8"
    sig = {"q_desc": _mangled([64, D], lay([64, D], qk), tq), "k_desc": _mangled([128, D], lay([128, D], qk), tq),
           "v_desc": (_mangled([D, 128], lay([D, 128], gl.int8), "torch.int8") if mode == 3 else
                      _mangled([D, 128], lay([D, 128], gl.float8e4nv), "torch.float8_e4m3fn")),
           "QS": sc, "KS": sc, "VS": vs, "O": "*bf16",
           "ks_desc": (_mangled([1, 128], KS_LAYOUT, "torch.float32") if mode in (2, 3)
                       else _mangled([128, D], lay([128, D], qk), tq)),
           "ds_desc": (_mangled([1, 128], KS_LAYOUT, "torch.float32") if mode == 3 and const["SMQ"] == 2
                       else _mangled([128, D], lay([128, D], qk), tq)),
           "BAD": "*i32", "c": "fp32", "P_SHIFT": "fp32"}
    names = attn_ws_fwd.arg_names
    for n in names:
        sig.setdefault(n, "constexpr" if n in const else "i32")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("QS", "KS", "VS", "O", "so_b", "so_h")}
    src = GluonASTSource(fn=attn_ws_fwd, signature={n: sig[n] for n in names},
                         constexprs={(names.index(k),): v for k, v in const.items() if k in names}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


if __name__ == "__main__":
    kernel = compile_ws(int(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:]))
    sass, usage = sass_of(kernel, "/tmp/gluon_ws.cubin")
    print(usage)
    # the key loops: the shortest backward-branch loops that issue wgmma and one exp2 per score (>= 60 MUFU)
    ins, found = loop_spans(sass)
    keyloops = []
    for n, a, b in found:
        h = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for _, t in ins[a:b + 1])
        if (h["QGMMA"] or h["IGMMA"]) and h["MUFU"] >= 60:
            keyloops.append((n, h))
    for n, h in sorted(keyloops, key=lambda x: x[0])[:2]:
        print(f"key loop: {n} instructions; " + ", ".join(f"{k} {v}" for k, v in h.most_common(40)))
