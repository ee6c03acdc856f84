"""benchmarks/attend_profile.py's timeline summary (the GPU time and span of one call's kernels), on kernel
intervals made here; the profile itself needs a CUDA GPU and is run by hand (benchmarks/README.md)."""

import pytest

from benchmark_scripts import load


def _load():
    return load("attend_profile")


def test_gpu_time_is_the_union_of_kernel_intervals_and_span_first_start_to_last_end():
    summary = _load().timeline_summary
    # three kernels: a 100 µs gap after the first, the third starting inside the second (another stream)
    s = summary([(1000.0, 50.0), (1150.0, 200.0), (1300.0, 100.0)])
    assert s["kernels"] == 3
    assert s["gpu"] == pytest.approx((50 + 250) / 1e3)  # [1000, 1050] and [1150, 1400]
    assert s["span"] == pytest.approx(0.4)  # 1000 .. 1400
    # unsorted input, one kernel inside another
    s = summary([(500.0, 10.0), (0.0, 1000.0)])
    assert s == dict(kernels=2, gpu=pytest.approx(1.0), span=pytest.approx(1.0))


def test_no_kernels_give_zeros():
    assert _load().timeline_summary([]) == dict(kernels=0, gpu=0.0, span=0.0)


def test_per_kernel_sums_each_kernel_over_the_calls_longest_first():
    # two pre-pass calls: kernel a twice per call (10 + 12, then 11 + 13 µs), kernel b once (30, 34 µs)
    events = [("a", 10.0), ("b", 30.0), ("a", 12.0), ("a", 11.0), ("b", 34.0), ("a", 13.0)]
    assert _load().per_kernel(events, 2) == [("b", 1.0, pytest.approx(32.0)), ("a", 2.0, pytest.approx(23.0))]
    assert _load().per_kernel([], 3) == []


def test_plans_off_turns_call_plans_off_for_the_block_only(monkeypatch):
    from lowbit_video.kernels import _launcher, plans

    monkeypatch.setattr(_launcher, "_hooked", lambda: False)
    monkeypatch.setattr("torch.cuda.is_current_stream_capturing", lambda: False)
    on = _load()._plans
    with on(True):
        assert plans.available()
    with on(False):
        assert not plans.available()
    assert plans.available()
    with pytest.raises(RuntimeError), on(False):
        raise RuntimeError("a failed timing")
    assert plans.available()


def test_launch_rows_give_each_kernels_median_time_and_the_gap_before_it():
    rows = _load().launch_rows
    # two calls of pre (10 µs) then kern (100 µs), given out of order; gaps worked by hand:
    # pre@0-10, kern@12-112 (gap 2), pre@115-125 (gap 3), kern@126-226 (gap 1)
    events = [("kern", 126.0, 100.0), ("pre", 0.0, 10.0), ("kern", 12.0, 100.0), ("pre", 115.0, 10.0)]
    assert rows(events) == [("pre", 2, 10.0, 3.0), ("kern", 2, 100.0, 1.5)]
    # one event: no gap before it
    assert rows([("only", 5.0, 7.0)]) == [("only", 1, 7.0, 0.0)]
    assert rows([]) == []
