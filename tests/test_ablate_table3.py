"""table3 end to end: generate (only what is missing) -> evaluate -> rows in the paper's order.

The float64 reference engine takes ~0.6 s or more per attention call on this CPU, so here the model's
quantized attention is replaced by a cheap stand-in that still depends on the recipe (Q, K, V
fake-quantized with the recipe's own quantizers and rotation, softmax unquantized). Everything else is
real: the shipped model, generate's run store, evaluate's metrics.json, compare's aggregation.
`make smoke` runs the real engine.
"""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import lowbit_video.models.attention_hook as attention_hook
from lowbit_video.ablate import AblateOptions, run_study
from lowbit_video.attention.quantizers import build_quantizer
from lowbit_video.recipes import load_recipe
from lowbit_video.transforms import qk_rotation

CONFIGS = ["Full", "w/o UOS", "w/o PNQ and UOS", "OCP MXFP4"]
RECIPES = ["mxattention", "mxattention-no-uos", "mxattention-no-pnq-uos", "mxfp4-ocp"]
PROMPT = "a red circle moving right on a black background"


def _cheap_attend(real):
    def attend(q, k, v, recipe, *, layout="BHND", scale=None, **kw):
        spec = load_recipe(recipe).attention
        if not spec.quantized or kw.get("return_lse") or kw.get("return_diagnostics"):
            return real(q, k, v, recipe, layout=layout, scale=scale, **kw)
        t = (lambda x: x.transpose(1, 2)) if layout == "BNHD" else (lambda x: x)
        qq, kk, vv = (t(x).to(torch.float64) for x in (q, k, v))
        rot = qk_rotation(spec.rotation, qq.shape[-1])
        qq, kk = build_quantizer("q", spec.q)(rot.apply(qq)), build_quantizer("k", spec.k)(rot.apply(kk))
        vv = build_quantizer("v", spec.v)(vv)
        return t(F.scaled_dot_product_attention(qq, kk, vv, scale=scale)).to(q.dtype)
    return attend


@pytest.fixture(scope="module")
def table3(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setattr(attention_hook, "attend", _cheap_attend(attention_hook.attend))
    tmp = tmp_path_factory.mktemp("t3")
    prompts = tmp / "p.txt"
    prompts.write_text(PROMPT + "\n")
    opts = AblateOptions(prompts=str(prompts), seeds=[0], steps=2, out=str(tmp / "out"), weights_dir=str(tmp / "no-weights"))
    first = run_study("table3", opts)
    second = run_study("table3", opts)
    mp.undo()
    return tmp, first, second


def test_rows_exact_and_values_are_the_runs_metrics(table3):
    tmp, res, _ = table3
    doc = json.loads((tmp / "out" / "table3.json").read_text())
    assert [r["config"] for r in doc["rows"]] == CONFIGS
    assert [r["recipe"] for r in doc["rows"]] == RECIPES
    assert [(r["hadamard"], r["pnq"], r["uos"]) for r in doc["rows"]] == [
        (True, True, True), (True, True, False), (True, False, False), (False, False, False)]
    assert res["generated"] == 5 and res["reused"] == 0
    for row in doc["rows"]:
        # the evaluation: one real metrics.json per run, paired against the fp16 run of the same prompt/seed
        runs = list((tmp / "out" / "tiny-shapes" / row["recipe"]).glob("*/seed-0"))
        assert len(runs) == 1 and row["n"] == 1
        m = json.loads((runs[0] / "metrics.json").read_text())
        assert m["baseline"]["recipe"] == "fp16"
        for key in ("cosine", "ssim", "psnr"):
            assert isinstance(row[key], float) and row[key] == pytest.approx(m["metrics"][key], rel=1e-12)
        assert 0 < row["cosine"] <= 1 and 0 < row["ssim"] <= 1 and row["psnr"] > 0
        assert isinstance(row["adherence"], float)
        assert isinstance(row["lpips"], dict) and "unavailable" in row["lpips"]  # no weights in --weights-dir
        for dim in ("subject_consistency", "imaging_quality", "aesthetic_quality"):
            assert isinstance(row[dim], (float, dict)) and (isinstance(row[dim], float) or "unavailable" in row[dim])
    assert doc["baseline"]["recipe"] == "fp16" and doc["baseline"]["n"] == 1
    assert {r["config"] for r in doc["paper"]} == set(CONFIGS) and {r["model"] for r in doc["paper"]} == {"Wan2.2", "HunyuanVideo"}
    assert doc["command"].startswith("lowbit-video ablate table3 --model tiny-shapes --prompts ")


def test_markdown_layout_and_best_bold(table3):
    tmp, res, _ = table3
    md = (tmp / "out" / "table3.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Configuration"))
    assert header.startswith("| Configuration | Hadamard | PNQ | UOS | Subject ↑ | Imaging ↑ | Aesthetic ↑ | Cosine ↑ | SSIM ↑ | PSNR ↑")
    body = [line for line in md.splitlines() if line.startswith("| ") and line.split("|")[1].strip() in CONFIGS + ["fp16"]]
    assert [line.split("|")[1].strip() for line in body] == ["fp16", *CONFIGS]
    assert body[1].split("|")[2:5] == [" ✓ ", " ✓ ", " ✓ "] and body[4].split("|")[2:5] == [" – ", " – ", " – "]
    cosines = [r["cosine"] for r in res["rows"]]
    best = CONFIGS[cosines.index(max(cosines))]
    cos_col = header.split("|").index(" Cosine ↑ ")
    assert [line.split("|")[cos_col].strip().startswith("**") for line in body[1:]] == [c == best for c in CONFIGS]
    assert "Command: `lowbit-video ablate table3" in md and "HunyuanVideo" in md


def test_rerun_reuses_runs(table3):
    _, first, second = table3
    assert second["generated"] == 0 and second["reused"] == 5
    assert second["rows"] == first["rows"]


def test_cli_json_on_the_existing_runs(table3):
    tmp, first, _ = table3
    # every run is complete and scored: the CLI only aggregates (no model is loaded, nothing is generated)
    res = subprocess.run([sys.executable, "-m", "lowbit_video", "ablate", "table3", "--prompts", str(tmp / "p.txt"),
                          "--steps", "2", "--out", str(tmp / "out"), "--weights-dir", str(tmp / "no-weights"), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["generated"] == 0 and [r["config"] for r in doc["rows"]] == CONFIGS
    assert doc["rows"] == first["rows"]


def test_a_study_recipe_with_fallback_fails_before_generating(tmp_path, monkeypatch):
    d = tmp_path / "recipes"
    (d / "ablations").mkdir(parents=True)
    (d / "mxattention.toml").write_text(  # shadows the project's recipe of the same name
        'name = "mxattention"\ndescription = "x"\ninclude = "%s"\n[policy]\nhigh_precision_steps = [-1]\n'
        % (attention_hook.__file__.rsplit("/lowbit_video/", 1)[0] + "/recipes/base/mxattention.toml"))
    monkeypatch.setenv("LOWBIT_VIDEO_RECIPES", str(d))
    res = subprocess.run([sys.executable, "-m", "lowbit_video", "ablate", "table3", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert "row 'Full' uses recipe mxattention" in res.stderr and "steps [-1]" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
