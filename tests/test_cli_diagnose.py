"""`lowbit-video` for RotateAttention, run as a user would: recipes listed, `diagnose attention` on the
new recipes, and `diagnose outliers` (Ψ per rotation and RoPE segment)."""

import json
import subprocess
import sys

NEW = ["rotateattention-half", "rotateattention-interleaved", "rotateattention-full", "int4-baseline"]
ROTATIONS = {"none", "interleaved", "half", "full"}


def cli_json(*args):
    res = subprocess.run([sys.executable, "-m", "lowbit_video", *args, "--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_recipes_json_lists_the_rotateattention_recipes():
    names = {r["name"] for r in cli_json("recipes")["recipes"]}
    assert set(NEW) <= names


def test_diagnose_attention_runs_the_new_recipes():
    data = cli_json("diagnose", "attention", "--outliers", "--seq", "256", *(a for n in NEW for a in ("-r", n)))
    res = {r["recipe"]: r for r in data["results"]}
    assert set(res) == set(NEW)
    assert all(0 < r["rel_l2"] < 1 and set(r["operand_rel_l2"]) == set("qkvp") for r in res.values())


def test_diagnose_outliers_json_shape_and_half_rotation_reduces_psi():
    data = cli_json("diagnose", "outliers", "--seq", "512")
    assert set(data["psi"]) == ROTATIONS
    assert set(data["segments"]) == {"t", "h", "w"}
    assert all(set(v) == ROTATIONS for v in data["segments"].values())
    assert data["rope_segments"] == {"t": 44, "h": 42, "w": 42}
    psi = data["psi"]
    assert all(isinstance(v, float) and v > 0 for v in psi.values())
    assert psi["half"] < psi["none"]
    assert psi["none"] == max(data["q"]["none"], data["k"]["none"])
    # Each input channel is (y_2k ± y_2k+1)/√2 of its pair's outputs, so a 2x2 mix lowers Ψ by at
    # most √2. The full Hadamard mixes all 128 channels (observed far lower on these inputs).
    assert psi["none"] / psi["half"] <= 2**0.5 + 1e-9
    assert psi["full"] < psi["half"]


def test_diagnose_outliers_errors_are_one_line():
    res = subprocess.run([sys.executable, "-m", "lowbit_video", "diagnose", "outliers", "--rope-segments", "44,42,40"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == ["error: RoPE segments [44, 42, 40] add up to 126, not head_dim 128"]
