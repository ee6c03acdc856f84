"""Offline sm_90 compile of the sage2 pre-pass kernels (kernels/prepass.py) with Triton 3.6, no GPU: registers,
spills and the SASS instruction histogram per kernel, for a tile size (bf16 BHND inputs, head_dim 128).

    /tmp/t36/bin/python results/scripts/prepass_compile.py KERNEL ROWS WARPS [KEY=VALUE ...]
KERNEL: int8 (the Q / K pass; SUB_MEAN=True for K) or v (the E4M3 V pass; ROWS = tokens per program)."""
import collections
import os
import re
import sys
import unittest.mock

sys.modules.setdefault("torch", unittest.mock.MagicMock())  # kernels/ imports torch at module level only
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

here = os.path.dirname(__file__)
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", ".."))
from sass_key_loop import sass_of  # noqa: E402

from kernels import prepass  # noqa: E402


def compile_pass(kind: str, rows: int, warps: int, over: dict):
    if kind == "int8":
        fn = prepass._int8_rows_kernel
        ptr = {"X": "*bf16", "MEAN": "*fp64", "OUT": "*i8", "SC": "*fp32"}
        const = dict(D=128, ROWS=rows, SUB_MEAN=False, EMULATE_FMA=False, sx_d=1)
    else:
        fn = prepass._v_fp8_kernel
        ptr = {"X": "*bf16", "SV": "*fp32", "OUT": "*u8"}
        const = dict(D=128, TB=rows, OPERAND_ORDER=True, EMULATE_FMA=False, sx_d=1)
    const.update({k: (v == "True" if v in ("True", "False") else int(v)) for k, v in over.items()})
    names = fn.arg_names
    sig = {n: ptr.get(n, "constexpr" if n in const else "i32") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n in ptr or n in ("sx_b", "sx_h", "sx_n", "n_pad")}
    src = ASTSource(fn=fn, signature=sig, constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))


if __name__ == "__main__":
    kernel = compile_pass(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), dict(a.split("=", 1) for a in sys.argv[4:]))
    sass, usage = sass_of(kernel, "/tmp/prepass.cubin")
    h = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", m).split()[0].split(".")[0]
                            for m in re.findall(r"/\*[0-9a-f]{4}\*/\s+([^;]+);", sass))
    print(usage, f"{sum(h.values())} instructions:", ", ".join(f"{k} {v}" for k, v in h.most_common(25)))
