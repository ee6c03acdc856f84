"""kernels/_launcher.py: the Gluon kernels' launches skip Triton's per-call specialization only for argument
signatures Triton has already compiled for. CPU tests drive `Launcher` with a stand-in JIT function and kernel (the
keying and the argument order the compiled launcher receives); the GPU test holds the direct launch to the same
output bits as Triton's own path."""

from __future__ import annotations

import pytest
import torch

from kernel_helpers import StandInJit, make_qkv, needs_cuda

from lowbit_video.kernels import _launcher


def test_argument_properties_separate_what_triton_specializes_on():
    p = _launcher._property
    # integers: 1, multiples of 16 and the int32 range are specializations; True is no integer here
    assert p(1) != p(2) and p(16) != p(17) and p(2 ** 31) != p(2 ** 31 - 16) and p(True) != p(1)
    assert p(2 ** 63) != p(2 ** 63 - 16)  # Triton's u64 against i64
    assert p(3) == p(5) and p(32) == p(48)
    assert p(0.5) == p(2.0) and p(None) != p(0)
    x = torch.zeros(64, dtype=torch.float32)
    assert p(x) == p(torch.zeros(8, dtype=torch.float32))  # shape is no specialization
    assert p(x[1:]) != p(x)  # 4-byte offset: not 16-byte aligned
    assert p(x.to(torch.bfloat16)) != p(x)


def _kernel_fn(X, n, c, BLOCK, FLAG=True, num_warps=4):
    pass


def test_first_call_goes_through_triton_then_the_compiled_launcher(no_gpu):
    jit = StandInJit(_kernel_fn)
    launch = _launcher.Launcher(jit)
    x = torch.zeros(64)
    launch((4,), x, 7, 0.5, BLOCK=64)
    assert len(jit.jit_calls) == 1 and jit.kernel.launches == []
    y = torch.ones(128)  # another tensor with the same properties
    launch((4, 2), y, 9, 1.5, BLOCK=64)
    assert len(jit.jit_calls) == 1
    # grid padded to 3-D, the stream, the handles, no launch metadata or hooks, then every parameter in
    # signature order with the constexpr defaults filled in
    assert jit.kernel.launches == [(4, 2, 1, "stream", "function", "metadata", None, None, None, y, 9, 1.5, 64,
                                    True, 4)]


@pytest.mark.parametrize("change", ["alignment", "dtype", "int_one", "int_16", "constexpr"])
def test_a_new_argument_signature_goes_through_triton_again(no_gpu, change):
    jit = StandInJit(_kernel_fn)
    launch = _launcher.Launcher(jit)
    x = torch.zeros(64)
    launch((1,), x, 7, 0.5, BLOCK=64)
    args, kw = [x, 7, 0.5], {"BLOCK": 64}
    if change == "alignment":
        args[0] = x[1:]
    elif change == "dtype":
        args[0] = x.double()
    elif change == "int_one":
        args[1] = 1
    elif change == "int_16":
        args[1] = 32
    else:
        kw["FLAG"] = False
    launch((1,), *args, **kw)
    assert len(jit.jit_calls) == 2 and jit.kernel.launches == []


def test_a_launch_hook_sends_every_call_through_triton(monkeypatch):
    monkeypatch.setattr(_launcher, "_device", lambda: 0)
    monkeypatch.setattr(_launcher, "_hooked", lambda: True)
    jit = StandInJit(_kernel_fn)
    launch = _launcher.Launcher(jit)
    for _ in range(3):
        launch((1,), torch.zeros(4), 7, 0.5, BLOCK=64)
    assert len(jit.jit_calls) == 3


def test_launch_hooks_are_seen_as_triton_keeps_them(monkeypatch):
    knobs = pytest.importorskip("triton").knobs
    assert not _launcher._hooked()  # Triton's empty hook chains (never None)
    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):
        hook = lambda *a: None  # noqa: E731
        chain.add(hook)
        try:
            assert _launcher._hooked()
        finally:
            chain.remove(hook)
        assert not _launcher._hooked()
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", lambda *a: None)  # a hook assigned directly
    assert _launcher._hooked()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["sage2-int8", "mxattention", "rotateattention-half", "draftattention2"])
def test_direct_launch_gives_triton_paths_bits_on_gpu(recipe, monkeypatch):
    """A repeated call (the Gluon kernel through its compiled launcher) and a call made with a launch hook set
    (Triton's path, `JITFunction.run`) give the same output bits."""
    from triton import knobs

    from lowbit_video.attention import attend
    from lowbit_video.draft.layout import VideoGeometry
    from lowbit_video.kernels import draft_ws, gluon_ws

    if recipe == "draftattention2":
        geo = VideoGeometry(2, 8, 12, prefix=4)
        q, k, v = (t.cuda() for t in make_qkv(1, 2, geo.tokens, geo.tokens, 64, outliers=False, seed=3))
        launcher = draft_ws._launch_draft_ws
    else:
        geo = None
        q, k, v = (t.cuda() for t in make_qkv(1, 3, 300, 260, 128, outliers=False, seed=3))
        launcher = gluon_ws._launch_attn_ws
    call = lambda: attend(q, k, v, recipe, geometry=geo)  # noqa: E731
    first = call()
    direct = []
    stream = _launcher._stream
    monkeypatch.setattr(_launcher, "_stream", lambda device: direct.append(device) or stream(device))
    again = call()
    assert direct, "the repeated call did not take the compiled kernel's launcher"
    n_direct = len(direct)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: None)
    through_triton = call()
    assert len(direct) == n_direct  # with a hook set, Triton's path
    torch.cuda.synchronize()
    assert torch.equal(first, again) and torch.equal(again, through_triton)
    assert len(launcher.compiled) >= 1
