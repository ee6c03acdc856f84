"""kernels/plans.py: a repeated attention call replays the launches recorded for its signature. CPU tests drive the
recorder and the replay with a stand-in JIT function and compiled kernel (which arguments a replay replaces, when a
plan must not be kept, the key, the cache); the GPU tests hold replayed calls to the output bits of calls that run
the whole path (`stats=` turns plans off)."""

from __future__ import annotations

import threading

import pytest
import torch

from kernel_helpers import StandInJit, make_qkv, needs_cuda

from lowbit_video.kernels import _launcher, plans


def _prepass_fn(X, OUT, n, BLOCK, FLAG=True):
    pass


def _kernel_fn(OUT_CODES, O, LSE, scale, MODE):
    pass


def _record(q, k, v, out, lse, pre, ker, workspace):
    """A call of two launches as the pre-passes make them: `pre` reads q and writes the workspace, `ker` reads the
    workspace and writes out and lse."""
    rec = plans.Recorder()
    rec(pre, (4, 2), q, workspace, 7, BLOCK=64)
    rec(ker, (3,), workspace, out, lse, 0.125, MODE=2)
    return rec


def test_a_replay_launches_the_recorded_kernels_with_the_calls_own_tensors(no_gpu):
    pre, ker = StandInJit(_prepass_fn), StandInJit(_kernel_fn)
    q, k, v, out, lse = (torch.zeros(16) for _ in range(5))
    workspace = torch.zeros(32, dtype=torch.int8)
    plan = _record(q, k, v, out, lse, pre, ker, workspace).plan("spec", q, k, v, out, lse, extra="extra")
    assert plan is not None and plan.extra == "extra" and plan.workspace_bytes == 32
    assert len(pre.jit_calls) == len(ker.jit_calls) == 1  # the recorded call ran through Triton's path
    q2, k2, v2, out2, lse2 = (torch.ones(16) for _ in range(5))
    plan.replay(q2, k2, v2, out2, lse2)
    assert len(pre.jit_calls) == len(ker.jit_calls) == 1
    # through the compiled kernels' own launchers: the grid as three dimensions, the recorded stream, the
    # handles, no metadata or hooks, then every parameter in order (constexpr defaults filled in), the call's
    # tensors in place of the recorded call's and the workspace as it was
    (p,) = pre.kernel.launches
    assert p[:9] == (4, 2, 1, "stream", "function", "metadata", None, None, None)
    assert p[9] is q2 and p[10] is workspace and p[11:] == (7, 64, True)
    (c,) = ker.kernel.launches
    assert c[:3] == (3, 1, 1) and c[9] is workspace and c[10] is out2 and c[11] is lse2 and c[12:] == (0.125, 2)


def test_no_plan_where_a_launch_took_a_view_of_the_calls_tensors(no_gpu):
    pre, ker = StandInJit(_prepass_fn), StandInJit(_kernel_fn)
    q, k, v, out, lse = (torch.zeros(16) for _ in range(5))
    rec = plans.Recorder()
    rec(pre, (1,), q[4:], torch.zeros(8), 7, BLOCK=64)  # a view: a replay would read the recorded call's q
    assert rec.plan("spec", q, k, v, out, lse) is None

    class Descriptor:  # a TMA descriptor of the call's output (its address is inside the descriptor)
        block_shape = (4,)
        base = out

    rec = plans.Recorder()
    rec(ker, (1,), torch.zeros(8), Descriptor(), lse, 0.5, MODE=2)
    assert rec.plan("spec", q, k, v, out, lse) is None
    rec = plans.Recorder()
    rec(ker, (1,), torch.zeros(8), out, lse, 0.5, MODE=2)
    assert rec.plan("spec", q, k, v, out, lse) is not None


def test_no_plan_over_the_workspace_limit(no_gpu, monkeypatch):
    pre, ker = StandInJit(_prepass_fn), StandInJit(_kernel_fn)
    q, k, v, out, lse = (torch.zeros(16) for _ in range(5))
    workspace = torch.zeros(1000, dtype=torch.int8)
    rec = _record(q, k, v, out, lse, pre, ker, workspace)
    monkeypatch.setattr(plans, "WORKSPACE_BYTES", 999)
    assert rec.plan("spec", q, k, v, out, lse) is None
    monkeypatch.setattr(plans, "WORKSPACE_BYTES", 1000)
    assert rec.plan("spec", q, k, v, out, lse).workspace_bytes == 1000


def test_views_of_one_workspace_buffer_count_once(no_gpu):
    ker = StandInJit(_kernel_fn)
    q, k, v, out, lse = (torch.zeros(16) for _ in range(5))
    buf = torch.zeros(64, dtype=torch.int8)
    rec = plans.Recorder()
    rec(ker, (1,), buf[:32], out, buf[32:], 0.5, MODE=2)
    assert rec.plan("spec", q, k, v, out, lse).workspace_bytes == 64


def test_the_key_separates_what_the_launches_depend_on(no_gpu):
    x = torch.zeros(2, 3, 8, 16)
    q, k, v = x.clone(), x.clone(), x.clone()
    base = plans.key("s", q, k, v, "BHND", None)
    assert plans.key("s", q, k, v, "BHND", None) == base
    assert plans.key("s", q.clone(), k.clone(), v.clone(), "BHND", None) == base  # other tensors, same signature
    assert plans.key("s", q, k, v, "BNHD", None) != base
    assert plans.key("s", q, k, v, "BHND", 0.5) != base
    assert plans.key("s", q.transpose(1, 2).contiguous().transpose(1, 2), k, v, "BHND", None) != base  # strides
    assert plans.key("s", q.reshape(2, 3, 16, 8), k, v, "BHND", None) != base  # shape
    assert plans.key("s", q.to(torch.float16), k, v, "BHND", None) != base
    unaligned = torch.zeros(2 * 3 * 8 * 16 + 1)[1:].view(2, 3, 8, 16)  # 4 bytes past a 16-byte boundary
    assert plans.key("s", unaligned, k, v, "BHND", None) != base
    assert plans.key("s", q, q, v, "BHND", None) != plans.key("s", q, q.clone(), v, "BHND", None)  # q is k
    other = []
    t = threading.Thread(target=lambda: other.append(plans.key("s", q, k, v, "BHND", None)))
    t.start()
    t.join()
    assert other[0] != base  # one plan per host thread


def test_the_cache_keeps_the_most_recent_plans_of_the_same_spec(monkeypatch):
    monkeypatch.setattr(plans, "MAX_PLANS", 2)
    cache = plans.Plans()
    spec = object()
    made = {n: plans.Plan(spec, (), 0, n) for n in "abc"}
    cache.put("a", made["a"])
    cache.put("b", made["b"])
    assert cache.get("a", spec) is made["a"]  # a is now the most recent
    cache.put("c", made["c"])
    assert cache.newest() is made["c"]
    assert cache.get("b", spec) is None and cache.get("a", spec) is made["a"] and len(cache) == 2
    assert cache.newest() is made["a"]  # (used last)
    assert cache.get("a", object()) is None  # the key's id(spec) now names another spec
    cache.put("d", None)  # a call whose plan was refused
    assert len(cache) == 2
    cache.clear()
    assert len(cache) == 0 and cache.newest() is None


@pytest.mark.parametrize("hooked,capturing,expected", [(False, False, True), (True, False, False),
                                                       (False, True, False)])
def test_plans_are_off_with_a_launch_hook_and_while_a_graph_is_captured(monkeypatch, hooked, capturing, expected):
    monkeypatch.setattr(_launcher, "_hooked", lambda: hooked)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
    assert plans.available() is expected


def test_a_declined_call_keeps_no_plan(no_gpu):
    """A pre-pass that did work outside its launches declines the plan: nothing to replay."""
    pre, ker = StandInJit(_prepass_fn), StandInJit(_kernel_fn)
    q, k, v, out, lse = (torch.zeros(16) for _ in range(5))
    rec = _record(q, k, v, out, lse, pre, ker, torch.zeros(32, dtype=torch.int8))
    rec.decline()
    assert rec.plan("spec", q, k, v, out, lse) is None


def test_decline_reaches_a_recorder_and_leaves_a_plain_launcher_alone():
    rec = plans.Recorder()
    plans.decline(rec)
    assert rec.declined
    plans.decline(_launcher.launch)  # a call not being recorded: nothing to keep, nothing to do


class _Listing(plans.Recorder):
    """A recorder that lists the launches it is handed and runs none (CPU tensors, no Triton launch)."""

    def __call__(self, fn, grid, *args, **constexprs):
        self.launches.append((fn, tuple(grid), args, constexprs))


def _mx_prepass_listed(q, k, v, *, gated=False, fp8=True):
    """prepass.mx_prepass on CPU tensors through a `_Listing` recorder (E4M3 or bf16 outputs): the recorder."""
    from types import SimpleNamespace

    from lowbit_video.kernels import prepass

    op = SimpleNamespace(rule="ocp", qmax=6.0)
    spec = SimpleNamespace(q=op, k=op, v=op, rotation="hadamard")
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    b, h, n, d = v.shape
    pad = -(-n // 128) * 128
    qo, ko = (torch.empty((b * h, pad, d), dtype=dtype) for _ in range(2))
    vo = torch.empty((b * h, d, pad), dtype=dtype)
    run = _Listing()
    prepass.mx_prepass(q, k, v, "BHND", spec, counts=torch.zeros(4, dtype=torch.int32), qk_out=(qo, ko), v_out=vo,
                       gated=gated, run=run)
    return run


@pytest.mark.parametrize("gated,fp8,expected", [
    (False, True, ["_mx_fold_kernel", "_mx_v_exponent_kernel", "_mx_cols_kernel"]),
    (True, False, ["_mx_fold_kernel", "_mx_cols_kernel"]),
])
def test_every_mxfp4_prepass_launch_goes_through_run(gated, fp8, expected):
    """The MXFP4 pre-pass issues each of its kernels through `run` (a plan records what `run` sees, so a launch
    past it would be missing from every replay); the E4M3 pre-pass three, the gated bf16 fallback two."""
    q, k, v = make_qkv(1, 2, 200, 200, 64, outliers=False, seed=1, dtype=torch.bfloat16)
    run = _mx_prepass_listed(q, k, v, gated=gated, fp8=fp8)
    assert [fn.fn.__name__ for fn, *_ in run.launches] == expected


@pytest.mark.parametrize("q_dtype,k_dtype,declined", [
    (torch.bfloat16, torch.bfloat16, False), (torch.float16, torch.float16, False),
    (torch.float32, torch.bfloat16, True), (torch.float64, torch.float64, True),
])
def test_an_mxfp4_prepass_that_casts_q_and_k_declines_the_plan(q_dtype, k_dtype, declined):
    """Q and K that torch casts first (two dtypes, float64) decline the call's plan (a replay would not repeat the
    cast); one dtype the kernels read keeps it."""
    q, k, v = make_qkv(1, 2, 130, 130, 64, outliers=False, seed=2, dtype=torch.bfloat16)
    assert _mx_prepass_listed(q.to(q_dtype), k.to(k_dtype), v).declined is declined


def test_mx_operands_zero_their_counters_by_a_launch(monkeypatch):
    """The MXFP4 operands' exactness counters are zeroed by the call's first launch (a replay zeroes them too), and
    the pre-pass gets the same `run`."""
    from types import SimpleNamespace

    from lowbit_video.kernels import operands, prepass

    seen = {}

    def fake_prepass(q, k, v, layout, spec, *, counts, qk_out, v_out, operand_order, run):
        seen["run"] = run
        return (torch.zeros(1, dtype=torch.int32),) * 3

    monkeypatch.setattr(prepass, "mx_prepass", fake_prepass)
    monkeypatch.setattr(prepass, "rule_params", lambda op: (2, 2, 6.0))
    spec = SimpleNamespace(p=SimpleNamespace(), placement="pnq")
    q, k, v = make_qkv(1, 2, 130, 130, 64, outliers=False, seed=2, dtype=torch.bfloat16)
    run = _Listing()
    operands.mx_operands(q, k, v, spec, "BHND", B=1, H=2, D=64, exact_p=False, gluon=True, run=run)
    (fn, grid, args, constexprs), = run.launches  # (the stand-in pre-pass launched nothing)
    assert fn is prepass._zero_kernel and grid == (1,) and args[0].shape == (4,) and constexprs == {"N": 4}
    assert seen["run"] is run and not run.declined


def _int4_operands_listed(recipe, v_dtype=torch.bfloat16):
    """operands.int4_operands of `recipe` on CPU tensors (head_dim 64, the ΔS table) through a `_Listing` recorder:
    (the recorder, the operands)."""
    from lowbit_video.kernels import dispatch, operands

    q, k, v = make_qkv(1, 2, 200, 200, 64, outliers=False, seed=3)
    run = _Listing()
    ops = operands.int4_operands(q, k, v.to(v_dtype), dispatch.attention_spec(recipe), "BHND", D=64, ds="table",
                                 qk_fp8=True, rope_segments=None, run=run)
    return run, ops


@pytest.mark.parametrize("recipe", ["rotateattention-half", "int4-baseline"])
def test_every_int4_prepass_launch_goes_through_run(recipe):
    """The INT4 pre-pass issues each of its kernels through `run`: K's token sums and mean, Q's and K's codes, V's
    maxima, scales and codes, the ΔS table; a launch past `run` would be missing from every replay."""
    run, _ = _int4_operands_listed(recipe)
    assert [fn.fn.__name__ for fn, *_ in run.launches] == [
        "_token_reduce_kernel", "_int4_kmean_kernel", "_int4_rows_kernel", "_int4_rows_kernel",
        "_int4_v_amax_kernel", "_int4_v_scales_kernel", "_int4_v_codes_kernel", "_delta_s_kernel"]
    assert not run.declined


@pytest.mark.parametrize("v_dtype,declined", [(torch.bfloat16, False), (torch.float32, False), (torch.float64, True)])
def test_an_int4_prepass_that_casts_v_declines_the_plan(v_dtype, declined):
    """V of a dtype the INT4 passes do not read (float64) is cast by torch first, which a replay would not repeat:
    the call declines its plan; bf16 and fp32 V keep it."""
    assert _int4_operands_listed("rotateattention-half", v_dtype)[0].declined is declined


@pytest.mark.parametrize("recipe,expected", [("rotateattention-half", ["attn_ws_fwd", "_unrotate_kernel"]),
                                             ("int4-baseline", ["attn_ws_fwd"])])
def test_the_gluon_int4_kernel_and_its_unrotation_go_through_run(recipe, expected):
    """With V rotated the Gluon kernel writes fp32 and a second launch undoes the rotation into the output: both
    through `run` (the unrotation of a replayed call writes the replay's output)."""
    from lowbit_video.kernels import gluon_ws, launch, modes, prepass

    _, ops = _int4_operands_listed(recipe)
    P = {**launch.OPERAND_DEFAULTS, "mode": modes.MODE_INT4, **ops, **launch._buffer_strides(ops, 2)}
    out = torch.empty((1, 2, 200, 64), dtype=torch.bfloat16)
    run = _Listing()
    gluon_ws.launch(P, out, prepass._bhnd_strides(out, "BHND"), 2, 200, 200, 0.125, torch.zeros(1, dtype=torch.int32),
                    run=run)
    names = [getattr(fn, "fn", fn).__name__ for fn, *_ in run.launches]
    assert names == expected
    if len(names) == 2:
        assert run.launches[1][2][2] is out  # (x, hv, out, ...): the call's output


# ------------------------------------------------------------------------------------------------------ GPU


@pytest.fixture
def replays(monkeypatch):
    """The number of replayed calls, counted at `Plan.replay`."""
    count = []
    replay = plans.Plan.replay
    monkeypatch.setattr(plans.Plan, "replay", lambda self, *a: count.append(1) or replay(self, *a))
    plans.clear()
    yield count
    plans.clear()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["sage2-int8", "mxattention", "mxfp4-ocp", "rotateattention-half", "int4-baseline"])
@pytest.mark.parametrize("shape,layout", [((1, 3, 300, 260, 128), "BHND"), ((2, 2, 200, 333, 64), "BNHD")])
@pytest.mark.parametrize("return_lse", [False, True])
def test_replayed_calls_give_the_bits_of_whole_calls_on_gpu(replays, recipe, shape, layout, return_lse):
    """Each replayed call equals, bit for bit, the same call run through dispatch, pre-pass and launch (a call
    with `stats` records and replays nothing): new tensors of the signature, and the recorded call's own tensors
    after their values changed in place. For the MXFP4 recipes (PNQ and direct placement) the last inputs hold a
    token 2^24 above the others, blocks the E4M3 fold cannot hold, so a replay's exact bf16 fallback runs too."""
    from lowbit_video.kernels.launch import KernelStats, attention, finalize_stats

    mx = recipe.startswith("mx")

    def inputs(seed):
        q, k, v = (t.cuda() for t in make_qkv(*shape, outliers=seed == 2, seed=seed))
        if seed == 3 and mx:
            q[:, :, 5] *= 2.0 ** 24
        if layout == "BNHD":
            q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        return q, k, v

    def whole(q, k, v, st=None):
        return attention(q, k, v, recipe, layout=layout, return_lse=return_lse, stats=st or KernelStats())

    q, k, v = inputs(1)
    first = attention(q, k, v, recipe, layout=layout, return_lse=return_lse)  # records
    assert len(plans.PLANS) == 1 and not replays
    for seed in (2, 3):
        q2, k2, v2 = inputs(seed)
        again = attention(q2, k2, v2, recipe, layout=layout, return_lse=return_lse)
        if mx and seed == 3:
            st = KernelStats()
            whole(q2, k2, v2, st)
            assert finalize_stats(st).qk_fallback  # (the inputs do reach the fallback)
        expected = whole(q2, k2, v2)
        for a, b in zip(again if return_lse else (again,), expected if return_lse else (expected,)):
            assert torch.equal(a, b)
    q.mul_(-0.5), k.add_(0.25), v.mul_(2.0)
    again = attention(q, k, v, recipe, layout=layout, return_lse=return_lse)
    expected = whole(q, k, v)
    torch.cuda.synchronize()
    assert len(replays) == 3
    for a, b in zip(again if return_lse else (again,), expected if return_lse else (expected,)):
        assert torch.equal(a, b)
    assert not torch.equal(first[0] if return_lse else first, again[0] if return_lse else again)


@pytest.mark.gpu
@needs_cuda
def test_a_call_on_another_stream_has_its_own_plan_on_gpu(replays):
    """Two streams never share a workspace: a call on a side stream records its own plan and equals the whole call."""
    from lowbit_video.kernels.launch import KernelStats, attention

    q, k, v = (t.cuda() for t in make_qkv(1, 2, 256, 256, 128, outliers=False, seed=5))
    attention(q, k, v, "sage2-int8")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = attention(q, k, v, "sage2-int8")
    torch.cuda.current_stream().wait_stream(side)
    assert len(plans.PLANS) == 2 and not replays
    assert torch.equal(out, attention(q, k, v, "sage2-int8", stats=KernelStats()))


@pytest.mark.gpu
@needs_cuda
def test_a_key_tensor_on_another_device_is_never_replayed_on_gpu(replays):
    """A CPU k of the recorded signature is the call's error to raise, not a pointer for the replayed kernels."""
    from lowbit_video.kernels.launch import attention

    q, k, v = (t.cuda() for t in make_qkv(1, 2, 256, 256, 128, outliers=False, seed=6))
    attention(q, k, v, "sage2-int8")
    with pytest.raises(Exception):
        attention(q, k.cpu(), v, "sage2-int8")
    assert not replays


@pytest.mark.gpu
@needs_cuda
def test_an_mxfp4_call_whose_q_and_k_torch_casts_keeps_no_plan_on_gpu(replays):
    """fp32 q with bf16 k: the MXFP4 pre-pass casts both in torch first, which a replay would not repeat, so the
    call declines its plan (and still equals the whole call)."""
    from lowbit_video.kernels.launch import KernelStats, attention

    q, k, v = (t.cuda() for t in make_qkv(1, 2, 256, 256, 128, outliers=False, seed=7))
    out = attention(q.float(), k, v, "mxattention")
    assert len(plans.PLANS) == 0
    assert torch.equal(out, attention(q.float(), k, v, "mxattention", stats=KernelStats()))


@pytest.mark.gpu
@needs_cuda
def test_an_int4_call_whose_v_torch_casts_keeps_no_plan_on_gpu(replays):
    """float64 V: the INT4 pre-pass casts it in torch first, which a replay would not repeat, so the call declines
    its plan (and still equals the whole call)."""
    from lowbit_video.kernels.launch import KernelStats, attention

    q, k, v = (t.cuda() for t in make_qkv(1, 2, 256, 256, 128, outliers=False, seed=8))
    out = attention(q, k, v.double(), "rotateattention-half")
    assert len(plans.PLANS) == 0
    assert torch.equal(out, attention(q, k, v.double(), "rotateattention-half", stats=KernelStats()))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["sage2-int8", "mxattention"])
@pytest.mark.parametrize("layout", ["BHND", "BNHD"])
@pytest.mark.parametrize("return_lse", [False, True])
def test_attend_replays_a_kept_plan_before_its_checks_and_route_on_gpu(replays, monkeypatch, recipe, layout,
                                                                      return_lse):
    """attend's later calls of a recorded signature replay the plan without asking for the route again, and equal,
    bit for bit, the same call run the whole way (plans off)."""
    from lowbit_video.attention import attend
    from lowbit_video.kernels import dispatch

    def inputs(seed):
        q, k, v = (t.cuda() for t in make_qkv(2, 3, 300, 260, 64, outliers=True, seed=seed))
        return tuple(t.transpose(1, 2).contiguous() for t in (q, k, v)) if layout == "BNHD" else (q, k, v)

    attend(*inputs(1), recipe, layout=layout, return_lse=return_lse)  # records
    routes = []
    route = dispatch.route
    monkeypatch.setattr(dispatch, "route", lambda *a, **kw: routes.append(1) or route(*a, **kw))
    q, k, v = inputs(2)
    again = attend(q, k, v, recipe, layout=layout, return_lse=return_lse)
    assert len(replays) == 1 and not routes
    monkeypatch.setattr(plans, "available", lambda: False)
    whole = attend(q, k, v, recipe, layout=layout, return_lse=return_lse)
    assert routes and len(replays) == 1
    for a, b in zip(again if return_lse else (again,), whole if return_lse else (whole,)):
        assert a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b)


@pytest.mark.gpu
@needs_cuda
def test_a_kept_plan_lets_no_autograd_call_or_bad_input_through_on_gpu(replays):
    """With a plan kept for the signature, a call autograd would record is still refused, and a k on the CPU is
    still the one-line input error: neither is replayed."""
    from lowbit_video.attention import attend
    from lowbit_video.errors import AttentionInputError, InferenceOnlyError

    q, k, v = (t.cuda() for t in make_qkv(1, 2, 256, 256, 128, outliers=False, seed=11))
    attend(q, k, v, "sage2-int8")
    with pytest.raises(InferenceOnlyError):
        attend(q.clone().requires_grad_(), k, v, "sage2-int8")
    with pytest.raises(AttentionInputError):
        attend(q, k.cpu(), v, "sage2-int8")
    assert not replays
    attend(q, k, v, "sage2-int8")
    assert len(replays) == 1
