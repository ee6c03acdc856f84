"""rowsum: the error split (hand-computed and additive), global scaling, PNQ exactly normalised, and the
study's outputs on small synthetic captures."""

import json

import pytest
import torch
from safetensors.torch import save_file

import lowbit_video.ablate.rowsum as rowsum
from lowbit_video.ablate import AblateOptions, load_study, run_study
from lowbit_video.ablate.captures import Capture
from lowbit_video.ablate.rowsum import PARTS, engine_rowsums, global_scaling, row_entropy, split_rows
from lowbit_video.formats import mxfp4


def test_hand_computed_split_of_one_block():
    # OCP: max 0.45 -> e = floor(log2 0.45) - 2 = -4, scale 1/16.
    # 0.45*16 = 7.2 -> saturates to 6 -> 0.375   (saturation  -0.075)
    # 0.01*16 = 0.16 -> 0                        (zeroing     -0.01)
    # 0.10*16 = 1.6 -> 1.5 -> 0.09375            (down        -0.00625)
    # 0.12*16 = 1.92 -> 2 -> 0.125               (up          +0.005)
    # 0.25*16 = 4 exact, zeros stay zero         (no contribution)
    p = torch.zeros(1, 32, dtype=torch.float64)
    p[0, :5] = torch.tensor([0.45, 0.01, 0.10, 0.12, 0.25], dtype=torch.float64)
    s = split_rows(p, rule="ocp")
    assert s["saturation"].item() == pytest.approx(-0.075, abs=1e-15)
    assert s["zeroing"].item() == pytest.approx(-0.01, abs=1e-15)
    assert s["rounding_down"].item() == pytest.approx(-0.00625, abs=1e-15)
    assert s["rounding_up"].item() == pytest.approx(0.005, abs=1e-15)
    assert s["counts"] == {"zeroing": 1, "saturation": 1, "rounding_down": 1, "rounding_up": 1}
    assert s["row_sum_q"].item() == pytest.approx(0.375 + 0.09375 + 0.125 + 0.25, abs=1e-15)


def test_parts_add_up_to_the_total_error_on_softmax_rows():
    g = torch.Generator().manual_seed(1)
    for rule in ("ocp", "uos", "tfs"):
        p = torch.softmax(torch.randn(64, 300, generator=g, dtype=torch.float64) * 3, dim=-1)  # 300: a ragged last block
        s = split_rows(p, rule=rule)
        parts = sum(s[n] for n in PARTS)
        direct = mxfp4.fake_quantize(p, rule=rule, axis=-1).sum(-1) - p.sum(-1)
        assert torch.allclose(parts, s["error"], rtol=0, atol=1e-14)
        assert torch.allclose(s["error"], direct, rtol=0, atol=1e-14)
        assert torch.allclose(s["row_sum_q"], mxfp4.fake_quantize(p, rule=rule, axis=-1).sum(-1), rtol=0, atol=1e-14)
        assert (s["zeroing"] <= 0).all() and (s["saturation"] <= 0).all() and (s["rounding_up"] >= 0).all()


def test_row_entropy():
    p = torch.tensor([[0.25] * 4, [1.0, 0, 0, 0]], dtype=torch.float64)
    assert row_entropy(p).tolist() == pytest.approx([torch.log(torch.tensor(4.0)).item(), 0.0])


def _captures(tmp_path, blocks=(0, 1, 2), n=128, heads=2, d=64):
    g = torch.Generator().manual_seed(2)
    caps = []
    for b in blocks:
        t = {name: (torch.randn(1, n, heads, d, generator=g) * (4.0 if name != "v" else 1.0)) for name in "qkv"}
        path = tmp_path / f"block{b:03d}.safetensors"
        save_file(t, str(path))
        caps.append(Capture(b, "a red circle moving right on a black background", 0, path))
    return caps


def test_pnq_rows_sum_to_one_exactly_and_direct_does_not(tmp_path):
    cap = _captures(tmp_path, blocks=(0,))[0]
    assert engine_rowsums(cap, "mxattention")["rowsum_dev_max"] == 0.0
    direct = engine_rowsums(cap, "mxfp4-ocp")
    assert direct["rowsum_dev_max"] > 1e-3 and direct["placement"] == "direct"


def test_global_scaling_restores_the_mean(tmp_path):
    cap = _captures(tmp_path, blocks=(0,))[0]
    g = global_scaling(cap, load_study("rowsum").params)
    assert g["mean_row_sum_before"] < 1 and g["factor"] > 1
    assert g["mean_row_sum_after"] == pytest.approx(1.0, abs=2e-3)
    assert g["over_normalised_after"] > g["over_normalised_before"]


def test_study_outputs(tmp_path, monkeypatch):
    caps = _captures(tmp_path)
    monkeypatch.setattr(rowsum, "ensure_captures", lambda r, cap, rep=None: caps)
    res = run_study("rowsum", AblateOptions(prompts="prompts/smoke.txt", steps=2, out=str(tmp_path / "out")))
    out = tmp_path / "out"
    for name in ("rowsum.md", "rowsum.json", "rowsum.png", "rowsum-entropy.png"):
        assert (out / name).stat().st_size > 0
        assert (out / name).read_bytes()[:4] == b"\x89PNG" or not name.endswith(".png")
    doc = json.loads((out / "rowsum.json").read_text())
    assert doc["study"] == res["study"] == "rowsum" and doc["n_tensors"] == 3
    assert [t["block"] for t in doc["tensors"]] == [0, 1, 2] and doc["representative"]["block"] == 1
    a = doc["average"]
    assert sum(a[n] for n in PARTS) == pytest.approx(a["total_error"], abs=1e-12)
    assert a["mean_row_sum"] - 1 == pytest.approx(a["total_error"], abs=1e-12)
    for t in doc["tensors"]:
        assert sum(t[n] for n in PARTS) == pytest.approx(t["total_error"], abs=1e-12)
    assert doc["pnq"]["rowsum_dev_max"] == 0.0 and doc["pnq"]["recipe"] == "mxattention"
    assert doc["paper"][0]["mean_row_sum"] == 0.9266 and doc["paper"][0]["zeroing"] == -0.0541
    md = (out / "rowsum.md").read_text()
    assert "| mean row sum |" in md and "0.9266" in md and "-0.0541" in md and "## PNQ: exactly normalised" in md
