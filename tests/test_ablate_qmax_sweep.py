"""qmax-sweep: the MSE sweep against a direct sweep and an independent implementation, a hand-computed
block, tie handling and binning, and the study end to end on real captures (2 steps, one prompt)."""

import json
import math

import numpy as np
import pytest
import torch

from lowbit_video.ablate import AblateOptions, load_study, run_study
from lowbit_video.ablate.qmax_sweep import distribution, optimum, sweep_mse
from lowbit_video.formats import mxfp4

GRID = list(range(600, 801, 5))
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
EVEN = {0.0, 1.0, 2.0, 4.0}  # even mantissa: where ties go


def _e2m1(a: float) -> float:
    """Independent round-to-nearest-even onto E2M1 magnitudes with saturation at 6."""
    m = min(abs(a), 6.0)
    d = np.abs(E2M1 - m)
    near = E2M1[d == d.min()]
    v = near[0] if len(near) == 1 else next(x for x in near if x in EVEN)
    return math.copysign(float(v), a)


def _mse_brute(x: np.ndarray, q: float) -> float:
    """Rows of x are 32-blocks. Scale 2^e, e the smallest integer with max|x| <= q * 2^e."""
    err = 0.0
    for blk in x:
        m = float(np.abs(blk).max())
        if m == 0:
            continue
        e = -60
        while m > q * 2.0**e:
            e += 1
        s = 2.0**e
        err += sum((_e2m1(v / s) * s - v) ** 2 for v in blk)
    return err / x.size


def test_sweep_matches_direct_quantizer_and_independent_brute_force():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 64, generator=g, dtype=torch.float64) * torch.logspace(-1, 1, 6, dtype=torch.float64)[:, None]
    fast = sweep_mse(x, GRID, axis=-1)
    direct = [float(((mxfp4.fake_quantize(x, rule="uos", q=h / 100, axis=-1) - x) ** 2).mean()) for h in GRID]
    brute = [_mse_brute(x.numpy().reshape(-1, 32), h / 100) for h in GRID]
    assert np.allclose(fast, direct, rtol=1e-12, atol=0)
    assert np.allclose(fast, brute, rtol=1e-12, atol=0)
    # V's axis (tokens): the same numbers as quantizing the transpose along its last axis
    assert np.allclose(sweep_mse(x.T.contiguous(), GRID, axis=-2), fast, rtol=1e-12)


def test_hand_computed_block():
    # one block: max 7.2, 31 values of 1.5.  q >= 7.2: scale 1, 7.2 -> 6 (err 1.44), 1.5 exact.
    # q < 7.2: scale 2, 3.6 -> 4 i.e. 8 (err 0.64), 0.75 -> 1 (tie to even) i.e. 2 (err 0.25 x 31 = 7.75).
    x = torch.tensor([7.2] + [1.5] * 31, dtype=torch.float64)
    mse = sweep_mse(x, GRID, axis=-1)
    for h, v in zip(GRID, mse):
        assert v == pytest.approx((1.44 if h >= 720 else 0.64 + 7.75) / 32, rel=1e-12), h
    o = optimum(GRID, mse, "smallest")
    assert o["optimum"] == "7.20" and o["interval"] == ["7.20", "8.00"] and o["contiguous"]
    assert len(o["ties"]) == 17 and "7.25" in o["ties"]
    assert optimum(GRID, mse, "largest")["optimum"] == "8.00"


def test_distribution_bins_and_percentages():
    p = load_study("qmax-sweep").params
    samples = [{"tensor": "q", "optimum": o, "ties": t} for o, t in
               (("7.20", ["7.20", "7.25"]), ("7.25", ["7.25"]), ("6.00", ["6.00"]), ("7.30", ["7.30"]))]
    samples += [{"tensor": "k", "optimum": "7.25", "ties": ["7.25"]}, {"tensor": "v", "optimum": "8.00", "ties": ["8.00"]}]
    d = distribution(samples, p)
    assert d["q"] == {"n": 4, "<=7.15": 25.0, "7.20": 25.0, "7.25": 25.0, ">=7.30": 25.0, "7.25_in_ties": 50.0}
    assert d["k"]["7.25"] == 100.0 and d["v"][">=7.30"] == 100.0


def test_study_end_to_end_on_real_captures(tmp_path, monkeypatch):
    study = tmp_path / "q.toml"
    study.write_text((load_study("qmax-sweep").file and open(load_study("qmax-sweep").file).read())
                     .replace('include = "base/capture.toml"', "") + '\n[capture]\nrecipe = "fp16"\nstep = 0\nblocks = [0, 5]\n')
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red circle moving right on a black background\n")
    opts = AblateOptions(prompts=str(prompts), steps=2, out=str(tmp_path / "out"))
    res = run_study(str(study), opts)
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} >= {"qmax-sweep.md", "qmax-sweep.json", "qmax-sweep.png", "captures"}
    doc = json.loads((out / "qmax-sweep.json").read_text())
    assert doc["grid"][0] == "6.00" and doc["grid"][-1] == "8.00" and len(doc["grid"]) == 41
    assert [(s["block"], s["tensor"]) for s in doc["samples"]] == [(b, t) for b in (0, 5) for t in "qkv"]
    for t in "qkv":
        d = doc["distribution"][t]
        assert d["n"] == 2 and sum(d[b] for b in ("<=7.15", "7.20", "7.25", ">=7.30")) == pytest.approx(100.0)
    assert [r["tensor"] for r in doc["paper"]] == list("qkvqkv")
    md = (out / "qmax-sweep.md").read_text()
    assert "| Model | Tensor | <=7.15 | 7.20 | 7.25 | >=7.30 |" in md and "Wan2.2 (paper)" in md
    assert doc["command"].startswith(f"lowbit-video ablate {study} --model tiny-shapes --prompts {prompts} --seeds 0 --steps 2")
    # the optimum recorded is the argmin of the recorded curve
    s = doc["samples"][0]
    assert s["optimum"] == doc["grid"][int(np.argmin(s["mse"]))]
    # a rerun reuses the captures: the model is never loaded
    import lowbit_video.models.registry as reg

    monkeypatch.setattr(reg, "load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("model loaded")))
    again = run_study(str(study), opts)
    assert again["distribution"] == res["distribution"]
