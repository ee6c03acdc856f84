"""benchmarks/kernel_ab.py's variants and its swap of the Gluon kernel module, on CPU (the timing itself needs a
CUDA GPU and is run by hand: benchmarks/README.md)."""

import sys

import pytest

from benchmark_scripts import load


def _ab():
    return load("kernel_ab")


def test_variants_parse_as_bench_kernels_config_does(tmp_path):
    ab = _ab()
    assert ab.parse_variant("default") == ab.Variant("default", None, {})
    v = ab.parse_variant("NUM_STAGES=4+DEFER=false")
    assert (v.path, v.config) == (None, {"NUM_STAGES": 4, "DEFER": False})
    other = tmp_path / "gluon_ws_rev.py"
    other.write_text("")
    v = ab.parse_variant(f"file={other}+CONSUMERS=3")
    assert (v.label, v.path, v.config) == (f"file={other}+CONSUMERS=3", str(other), {"CONSUMERS": 3})
    assert ab.parse_variant(f"file={other}").config == {}
    pre = tmp_path / "prepass_rev.py"
    pre.write_text("")
    v = ab.parse_variant(f"file={other}+prepass={pre}+NUM_STAGES=4")
    assert (v.path, v.prepass, v.config) == (str(other), str(pre), {"NUM_STAGES": 4})
    assert ab.parse_variant(f"prepass={pre}") == ab.Variant(f"prepass={pre}", None, {}, str(pre))


@pytest.mark.parametrize("text, reason", [("", "a variant is"), ("file=", "needs a path"),
                                          ("file=/no/such/gluon_ws.py", "no file"),
                                          ("prepass=", "needs a path"), ("prepass=/no/such/prepass.py", "no file"),
                                          (f"file={__file__}+file={__file__}", "given twice"),
                                          ("NO_SUCH_KEY=1", "unknown kernel config key"),
                                          ("NUM_STAGES=four", "must be an integer")])
def test_bad_variants_are_one_line_errors(text, reason):
    with pytest.raises(ValueError, match=reason):
        _ab().parse_variant(text)


def test_a_kernel_file_imports_beside_the_checkout_and_is_what_launch_imports_while_swapped_in(tmp_path):
    ab = _ab()
    import lowbit_video.kernels as package
    from lowbit_video.kernels import _launcher

    other = tmp_path / "gluon_ws_rev.py"
    other.write_text("from ._launcher import Launcher\nWHO = 'the other version'\n")
    module = ab.load_kernel_file(str(other), 0)
    assert module.Launcher is _launcher.Launcher  # its relative imports are this checkout's siblings
    before = sys.modules.get(ab.KERNEL_MODULE)
    with ab.kernel_module(module):
        from lowbit_video.kernels import gluon_ws  # as kernels/launch.py imports it at each launch

        assert gluon_ws.WHO == "the other version"
    assert sys.modules.get(ab.KERNEL_MODULE) is before
    assert getattr(package, "gluon_ws", None) is before
    with ab.kernel_module(None):  # this checkout's: nothing swapped
        assert sys.modules.get(ab.KERNEL_MODULE) is before


def test_a_prepass_file_is_what_operands_calls_while_swapped_in(tmp_path):
    ab = _ab()
    from lowbit_video.kernels import _rounding, operands

    other = tmp_path / "prepass_rev.py"
    other.write_text("from ._rounding import round_to_int\nWHO = 'the other version'\n")
    module = ab.load_kernel_file(str(other), 0, kind="prepass")
    assert module.round_to_int is _rounding.round_to_int  # its relative imports are this checkout's siblings
    before = operands.prepass
    with ab.variant_modules(None, module):
        assert operands.prepass.WHO == "the other version"
    assert operands.prepass is before
    with ab.prepass_module(None):  # this checkout's: nothing swapped
        assert operands.prepass is before


def test_no_call_plan_crosses_into_or_out_of_a_variant():
    """A plan replays the launches of the variant that recorded it, so each variant's block starts and ends with
    none (a stand-in plan: the store only holds what it is given)."""
    ab = _ab()
    from lowbit_video.kernels import plans

    plans.PLANS.put(("outside",), object())
    with ab.variant_modules(None, None):
        assert len(plans.PLANS) == 0
        plans.PLANS.put(("inside",), object())
    assert len(plans.PLANS) == 0
