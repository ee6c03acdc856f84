"""Offline sm_90 compile of the Gluon probe (results/scripts/gluon_probe.py) with Triton 3.6, no GPU: registers,
shared memory and the key loop's order of wgmma issues, waits and ALU runs (the check that the waits sit
after the softmax, not right after each wgmma).

    /tmp/t36/bin/python results/scripts/gluon_compile.py [BLOCK_M STAGES num_warps]
"""
import os
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type

sys.path.insert(0, os.path.dirname(__file__))
from gluon_probe import fa_fp8_probe  # noqa: E402


def _mangled(block, lay, dtype="torch.float8_e4m3fn"):
    """The signature string of a TMA descriptor argument with this block, shared layout and torch dtype name."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    class FakeT:  # what TensorDescriptor reads off a torch tensor
        def data_ptr(self):
            return 1024

    FakeT.dtype = dtype
    return mangle_type(TensorDescriptor(FakeT(), [1 << 20, block[1]], [block[1], 1], block, lay))


def compile_probe(BLOCK_M=64, STAGES=3, num_warps=4, BLOCK_N=128, D=128, fn=fa_fp8_probe, extra_const=None,
                  extra_sig=None):
    names = fn.arg_names
    const = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=D, STAGES=STAGES, num_warps=num_warps, so_n=D)
    const.update(extra_const or {})
    const = {k: v for k, v in const.items() if v is not None}  # None: leave the argument a runtime value
    sig = {"q_desc": _mangled([BLOCK_M, D], gl.NVMMASharedLayout.get_default_for([BLOCK_M, D], gl.float8e4nv)),
           "k_desc": _mangled([BLOCK_N, D], gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], gl.float8e4nv)),
           "v_desc": _mangled([D, BLOCK_N], gl.NVMMASharedLayout.get_default_for([D, BLOCK_N], gl.float8e4nv)),
           "O": "*bf16", "N": "i32", "c": "fp32", "so_bh": "i32", "so_n": "i32"}
    sig.update(extra_sig or {})
    for n in names:
        if n in const:
            sig[n] = "constexpr"
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("O", "N", "so_bh", "so_n")
             if n in names and n not in const}
    src = GluonASTSource(fn=fn, signature={n: sig[n] for n in names},
                         constexprs={(names.index(k),): v for k, v in const.items() if k in names}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps))


def report(kernel):
    from sass_key_loop import loop_spans, sass_of

    sass, usage = sass_of(kernel, "/tmp/gluon_probe.cubin")
    print(usage)
    ins, found = loop_spans(sass)
    _, s, e = found[0]
    out, run, mufu = [], 0, 0
    for _, t in ins[s:e + 1]:
        op = re.sub(r"^@!?U?P\w+\s+", "", t).split()[0]
        if "GMMA" in op or op.startswith(("WARPGROUP", "BAR", "SYNCS", "UTMALDG", "BRA", "DEPBAR")):
            if run:
                out.append(f"[{run} alu, {mufu} mufu]")
                run = mufu = 0
            out.append(t if "DEPBAR" in op else op)
        else:
            run += 1
            mufu += op.startswith("MUFU")
    if run:
        out.append(f"[{run} alu, {mufu} mufu]")
    print(f"key loop: {e - s + 1} instructions")
    print(" | ".join(out))


if __name__ == "__main__":
    a = [int(x) for x in sys.argv[1:4]] if len(sys.argv) > 3 else [64, 3, 4]
    report(compile_probe(*a))


def compile_ws(STAGES=2, PINGPONG=False, CONSUMER_REGS=232):
    from gluon_probe import fa_fp8_ws_probe

    return compile_probe(64, STAGES, 4, fn=fa_fp8_ws_probe,
                         extra_const=dict(PINGPONG=PINGPONG, CONSUMER_REGS=CONSUMER_REGS, so_n=None))
