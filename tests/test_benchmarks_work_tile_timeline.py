"""benchmarks/work_tile_timeline.py's arithmetic on a timeline made here by hand; the traced kernel itself is
GPU-tested in tests/test_kernels_gluon_ws.py."""

import pytest

from benchmark_scripts import load


def _record(tile, wg, sm, start, first_qk, loop_end, end, offset_ns):
    # a 1000 MHz clock: the global timer (ns) is the SM's cycle count plus the SM's offset
    return dict(tile=tile, wg=wg, sm=sm, start=start, first_qk=first_qk, loop_end=loop_end, end=end,
                global_start_ns=start + offset_ns, global_end_ns=end + offset_ns)


def _timeline():
    recs = []
    # SM 0: work tile 0 at cycles 0..1210, then work tile 1 at 1320..2530; SM 1: work tile 2 at 300..1510.
    # Each work tile: prologue 100 cycles, 10 key tiles of 100, epilogue 100; its second warpgroup 10 cycles behind
    for tile, sm, t0, offset in ((0, 0, 0, 5000), (1, 0, 1320, 5000), (2, 1, 300, 4700)):
        for wg in (0, 1):
            s = t0 + 10 * wg
            recs.append(_record(tile, wg, sm, s, s + 100, s + 1100, s + 1200, offset))
    return recs


def test_summary_of_a_hand_made_timeline():
    s = load("work_tile_timeline").summarize(_timeline(), n_tiles=10)
    assert s["clock_mhz"] == pytest.approx(1000.0)
    assert (s["sms"], s["work_tiles"], s["tiles_per_sm_min"], s["tiles_per_sm_max"]) == (2, 3, 1, 2)
    assert s["prologue_us"] == pytest.approx(0.1)
    assert s["key_tile_us"] == pytest.approx(0.1)
    assert s["epilogue_us"] == pytest.approx(0.1)
    assert s["gap_us"] == pytest.approx(0.11)  # SM 0: tile 1's first start 1320 after tile 0's last end 1210
    assert s["fixed_key_tiles"] == pytest.approx(3.1)  # (0.1 + 0.1 + 0.11) / 0.1
    assert s["span_us"] == pytest.approx(2.53)  # global 5000 .. 7530 ns
    # busy: SM 0 1.21 + 1.21 µs, SM 1 1.21 µs; mean 1.815 of 2.53
    assert s["busy_share"] == pytest.approx(1.815 / 2.53)
    assert s["tail_us"] == pytest.approx(1.32)  # SM 1's last end 6210 ns, SM 0's 7530 ns


def test_records_unpack_the_buffer_by_work_tile_and_warpgroup():
    import torch

    buf = torch.arange(2 * 2 * 8, dtype=torch.int64).reshape(2, 2, 8)
    recs = load("work_tile_timeline").records_of(buf)
    assert [(r["tile"], r["wg"]) for r in recs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert recs[3] == dict(tile=1, wg=1, sm=24, global_start_ns=25, start=26, first_qk=27, loop_end=28, end=29,
                           global_end_ns=30)


def test_without_a_gpu_the_script_says_so_in_one_line(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert load("work_tile_timeline").main(["--shapes", "short"]) == 2
    assert capsys.readouterr().err.strip() == "error: needs a CUDA device (sm_90)"
