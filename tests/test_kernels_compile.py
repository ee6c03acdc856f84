"""Every GPU attention kernel compiles for sm_90 with the installed Triton, offline (triton.compile for a cuda:90
target, ptxas and cuobjdump from the triton wheel; no GPU): the Triton kernels' GPU tests run only on a GPU
machine, whose image may carry another Triton than the one a user installs, and a kernel that stops compiling
under a newer Triton (a Gluon shared-memory view, say) would otherwise show only there. Each build is checked for
the tensor-core instructions its design issues in the key loop, read off the disassembly."""

import pytest

from benchmark_scripts import load
from kernel_helpers import HAS_TRITON

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")

# (kernel, mode, settings as benchmarks/sass_key_loop.py takes them, MMA opcodes its key loop must issue)
BUILDS = [
    ("gluon", 1, dict(STAGES=4, QMAX=7.25, EARLY=True, WORK_LOOP=True), {"QGMMA"}),  # MXFP4: E4M3 QKᵀ and P̂·V̂
    ("gluon", 2, dict(STAGES=3, EARLY=True, WORK_LOOP=True), {"IGMMA", "QGMMA"}),  # sage2: INT8 QKᵀ, E4M3 P̂·V̂
    ("gluon", 2, dict(D=64, STAGES=3, EARLY=True, WORK_LOOP=True, NWG=3), {"IGMMA", "QGMMA"}),
    ("gluon", 2, dict(STAGES=3, EARLY=True, WORK_LOOP=True, TRACE=True), {"IGMMA", "QGMMA"}),  # timeline stamps
    ("gluon", 3, dict(STAGES=3, P_SHIFT=0, QK="fp8", EARLY=True, WORK_LOOP=True), {"QGMMA", "IGMMA"}),  # INT4
    ("draft", None, {}, {"HGMMA", "IGMMA", "QGMMA"}),  # 16-bit (and NVFP4 as fp16), INT8 QKᵀ, FP8 P̂·V̂ phases
    ("triton", 0, {}, {"HGMMA"}),
    ("triton", 1, {}, {"QGMMA"}),
    ("triton", 2, {}, {"IGMMA", "QGMMA"}),
    ("triton", 3, dict(SMQ=2, P_FP8=False, P_SHIFT=0.0, PNQ=False, NUM_STAGES=3, QK="fp8"), {"QGMMA", "IGMMA"}),
    ("triton", 4, {}, {"HGMMA"}),
]


@pytest.mark.parametrize("kernel, mode, settings, mmas", BUILDS,
                         ids=[f"{k}-{m}-{'-'.join(f'{a}{b}' for a, b in s.items())}" for k, m, s, _ in BUILDS])
def test_kernel_compiles_for_sm90_and_issues_its_mmas(kernel, mode, settings, mmas, tmp_path):
    s = load("sass_key_loop")
    over = dict(settings)
    if kernel == "gluon":
        compiled = s.compile_gluon(mode, over)
    elif kernel == "draft":
        compiled = s.compile_draft(over)
    else:
        compiled = s.compile_triton(mode, over)
    sass, _ = s.sass_of(compiled, str(tmp_path / "kernel.cubin"))
    ins, loops = s.loop_spans(sass)
    assert loops, "no loop in the disassembly"
    issued = set()
    for _, first, last in loops:
        issued |= {op for op in s.histogram(ins, first, last) if op.endswith("GMMA")}
    assert mmas <= issued, f"loops issue {sorted(issued)}, the design needs {sorted(mmas)}"


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("launch", ["sage-stats", "sage-kv"])
def test_sage_prepass_compiles_for_sm90(launch, head_dim):
    """The interpreter, which the CPU tests run the pre-pass under, accepts what the compiler refuses (a global
    that is not a constexpr, say, or inline PTX that ptxas rejects): each launch compiled for sm_90 as the
    launcher specializes it."""
    compiled = load("sass_key_loop").compile_prepass(launch, dict(D=head_dim))
    assert compiled.asm["cubin"], "no cubin"


def test_sass_key_loop_prints_a_prepass_launchs_loops(tmp_path, capsys):
    """`sass_key_loop.py prepass sage-kv`: registers, the kernel's instruction count and its loops (a K program's
    two), and a one-line refusal of an unknown launch."""
    s = load("sass_key_loop")
    assert s.main(["prepass", "sage-kv", "--cubin", str(tmp_path / "k.cubin")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("REG:") and out[0].endswith("instructions")
    assert sum(line.startswith("loop: ") for line in out) >= 2
    with pytest.raises(SystemExit):
        s.main(["prepass", "sage-q"])
    assert "the pre-pass launch is one of sage-stats, sage-kv, got 'sage-q'" in capsys.readouterr().err
