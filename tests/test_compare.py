"""`compare`: aggregation, best marking, unavailable values, md/csv/json shapes, the CLI.

metrics.json files are written here with known values; every expected average below is worked out
by hand in the comments, not by the code under test.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from lowbit_video import runstore, video_io
from lowbit_video.compare import collect, render_csv, render_markdown, rows_json, to_json
from lowbit_video.errors import UserError

REPO = Path(__file__).resolve().parent.parent
EXE = REPO / ".venv" / "bin" / "lowbit-video"
MODEL = "tiny-shapes"
P1 = "a red circle moving right on a white background"
P2 = "a blue square static on a black background"
BASE_PAIRED = {k: {"unavailable": "baseline run"} for k in ("psnr", "ssim", "cosine", "lpips")}
AESTH_MISSING = "weights missing: vbench/clip_model/ViT-L-14.pt"


def make_run(out: Path, recipe: str, prompt: str, seed: int, metrics: dict | None, *, model: str = MODEL,
             paired_with: str | None = "fp16", steps: int = 12) -> Path:
    """A complete run (frames.npz + meta.json); metrics.json when `metrics` is given."""
    d = runstore.run_dir(out, model, recipe, prompt, seed)
    d.mkdir(parents=True, exist_ok=True)
    # crc32, not hash(): str hashes are salted per process; the frames must be the same in every run
    rng = np.random.default_rng(zlib.crc32(f"{recipe}|{prompt}|{seed}".encode()))
    frames = rng.integers(0, 256, size=(8, 16, 16, 3), dtype=np.uint8)
    video_io.write_frames_npz(frames, d / "frames.npz")
    sha = video_io.frames_sha256(frames)
    meta = {"format": "lowbit-video run", "format_version": 1,
            "model": {"name": model, "family": "tiny-shapes" if model == MODEL else "wan"},
            "recipe": {"name": recipe}, "prompt": prompt, "seed": seed, "steps": steps, "guidance": 1.0,
            "size": {"height": 16, "width": 16, "frames": 8}, "fps": 8, "frames_sha256": sha,
            "files": {"frames": "frames.npz"}}
    runstore.atomic_write_json(d / "meta.json", meta)
    if metrics is not None:
        base = None
        if paired_with is not None and recipe != paired_with:
            bdir = runstore.run_dir(out, model, paired_with, prompt, seed)
            bmeta = runstore.read_meta(bdir) or {}
            base = {"recipe": paired_with, "dir": str(bdir.relative_to(out)), "frames_sha256": bmeta.get("frames_sha256")}
        doc = {"format": "lowbit-video metrics", "format_version": 1,
               "run": {"model": model, "recipe": recipe, "prompt": prompt, "seed": seed, "steps": steps,
                       "frames_sha256": sha},
               "baseline": base, "metrics": metrics, "details": {}}
        runstore.atomic_write_json(d / "metrics.json", doc)
    return d


def standard_grid(out: Path) -> Path:
    """fp16 / mxattention / mxfp4-ocp on (P1, 0) and (P2, 0). Baselines first (pairing reads their sha)."""
    make_run(out, "fp16", P1, 0, {**BASE_PAIRED, "subject_consistency": 0.95, "imaging_quality": 0.70,
                                  "aesthetic_quality": 0.60, "temporal_flickering": 0.98, "adherence": 1.0})
    make_run(out, "fp16", P2, 0, {**BASE_PAIRED, "subject_consistency": 0.97, "imaging_quality": 0.72,
                                  "aesthetic_quality": 0.62, "temporal_flickering": 0.96, "adherence": 0.0})
    make_run(out, "mxattention", P1, 0, {"psnr": 20.0, "ssim": 0.80, "cosine": 0.99, "lpips": 0.30,
                                         "subject_consistency": 0.94, "imaging_quality": 0.69,
                                         "aesthetic_quality": 0.61, "temporal_flickering": 0.97, "adherence": 1.0})
    make_run(out, "mxattention", P2, 0, {"psnr": 22.0, "ssim": 0.90, "cosine": 0.97, "lpips": 0.40,
                                         "subject_consistency": 0.96, "imaging_quality": 0.71,
                                         "aesthetic_quality": 0.63, "temporal_flickering": 0.97, "adherence": 1.0})
    make_run(out, "mxfp4-ocp", P1, 0, {"psnr": 15.0, "ssim": 0.50, "cosine": 0.93, "lpips": 0.10,
                                       "subject_consistency": 0.96, "imaging_quality": 0.60,
                                       "aesthetic_quality": {"unavailable": AESTH_MISSING},
                                       "temporal_flickering": 0.95, "adherence": 0.0})
    make_run(out, "mxfp4-ocp", P2, 0, {"psnr": 16.0, "ssim": 0.60, "cosine": 0.95, "lpips": 0.20,
                                       "subject_consistency": 0.98, "imaging_quality": 0.64,
                                       "aesthetic_quality": 0.65, "temporal_flickering": 0.99, "adherence": 1.0})
    return out


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    return standard_grid(tmp_path / "runs")


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


# ------------------------------------------------------------------------------ aggregation


def test_hand_computed_averages_and_best(grid: Path):
    comp = collect([grid])
    assert [m.model for m in comp.models] == [MODEL]
    mc = comp.models[0]
    # recipes in the order they first appear (sorted walk: mxattention < mxfp4-ocp)
    assert [r.recipe for r in mc.rows] == ["mxattention", "mxfp4-ocp"]
    mx, ocp = mc.rows
    assert mx.n == 2 and ocp.n == 2
    # mxattention: psnr (20+22)/2 = 21, ssim (.8+.9)/2 = .85, cosine (.99+.97)/2 = .98, lpips (.3+.4)/2 = .35
    assert mx.values["psnr"] == pytest.approx(21.0)
    assert mx.values["ssim"] == pytest.approx(0.85)
    assert mx.values["cosine"] == pytest.approx(0.98)
    assert mx.values["lpips"] == pytest.approx(0.35)
    assert mx.values["subject_consistency"] == pytest.approx(0.95)
    assert mx.values["aesthetic_quality"] == pytest.approx(0.62)
    # mxfp4-ocp: psnr 15.5, lpips (.1+.2)/2 = .15, imaging (.6+.64)/2 = .62, subject (.96+.98)/2 = .97
    assert ocp.values["psnr"] == pytest.approx(15.5)
    assert ocp.values["lpips"] == pytest.approx(0.15)
    assert ocp.values["imaging_quality"] == pytest.approx(0.62)
    assert ocp.values["subject_consistency"] == pytest.approx(0.97)
    assert ocp.values["adherence"] == pytest.approx(0.5)
    # baseline row: subject (.95+.97)/2 = .96, imaging .71, aesthetic .61, adherence (1+0)/2 = .5
    b = mc.baseline_row
    assert b.recipe == "fp16" and b.n == 2
    assert b.values["subject_consistency"] == pytest.approx(0.96)
    assert b.values["imaging_quality"] == pytest.approx(0.71)
    assert b.values["adherence"] == pytest.approx(0.5)
    assert "psnr" not in b.values
    # best: higher is better except LPIPS (lower); ties -> first row (flicker .97 both)
    assert mc.best["psnr"] == "mxattention"
    assert mc.best["ssim"] == "mxattention"
    assert mc.best["cosine"] == "mxattention"
    assert mc.best["lpips"] == "mxfp4-ocp"
    assert mc.best["subject_consistency"] == "mxfp4-ocp"
    assert mc.best["imaging_quality"] == "mxattention"
    assert mc.best["aesthetic_quality"] == "mxattention"   # the only number among the rows
    assert mc.best["temporal_flickering"] == "mxattention"
    assert sorted(mc.pairs) == sorted([(P1, 0), (P2, 0)]) and len(mc.pairs) == 2
    assert not mc.pair_sets_differ and comp.warnings == []


def test_column_order_paper_layout(grid: Path):
    mc = collect([grid]).models[0]
    assert mc.columns == ["subject_consistency", "imaging_quality", "aesthetic_quality", "temporal_flickering",
                          "cosine", "ssim", "psnr", "lpips", "adherence"]


def test_unavailable_propagates_to_the_row(grid: Path):
    ocp = collect([grid]).models[0].row("mxfp4-ocp")
    v = ocp.values["aesthetic_quality"]
    assert isinstance(v, dict) and AESTH_MISSING in v["unavailable"] and "1 of 2" in v["unavailable"]


def test_metric_not_evaluated_is_unavailable(tmp_path: Path):
    out = tmp_path / "r"
    make_run(out, "fp16", P1, 0, dict(BASE_PAIRED))
    make_run(out, "nvfp4", P1, 0, {"psnr": 30.0, "ssim": 0.9, "cosine": 0.99})
    row = collect([out]).models[0].row("nvfp4")
    assert row.values["psnr"] == pytest.approx(30.0)
    assert "not evaluated" in row.values["lpips"]["unavailable"]
    assert "not evaluated" in row.values["imaging_quality"]["unavailable"]


def test_recipe_order_argument_and_command_line_order(grid: Path):
    comp = collect([grid], recipe_order=["mxfp4-ocp", "mxattention"])
    assert [r.recipe for r in comp.models[0].rows] == ["mxfp4-ocp", "mxattention"]
    # paths in command-line order decide first appearance
    base = grid / MODEL
    comp = collect([base / "mxfp4-ocp", base / "mxattention", base / "fp16"])
    assert [r.recipe for r in comp.models[0].rows] == ["mxfp4-ocp", "mxattention"]


def test_different_pair_sets_warn(grid: Path):
    make_run(grid, "fp16", P1, 1, dict(BASE_PAIRED))
    make_run(grid, "nvfp4", P1, 1, {"psnr": 10.0, "ssim": 0.1, "cosine": 0.5, "lpips": 0.9})
    comp = collect([grid])
    mc = comp.models[0]
    assert mc.row("nvfp4").n == 1 and mc.row("nvfp4").pairs == [(P1, 1)]
    assert mc.pair_sets_differ
    assert any("different (prompt, seed) pairs" in w for w in comp.warnings)
    assert to_json(comp)["models"][0]["pair_sets_differ"] is True


def test_runs_without_metrics_are_left_out_with_a_warning(grid: Path):
    make_run(grid, "nvfp4", P1, 0, None)
    comp = collect([grid])
    assert comp.models[0].row("nvfp4") is None
    assert any("no metrics.json" in w and "lowbit-video evaluate" in w for w in comp.warnings)
    assert any(x["reason"] == "no metrics.json" for x in comp.left_out)


def test_no_metrics_at_all_is_an_error(tmp_path: Path):
    make_run(tmp_path / "r", "fp16", P1, 0, None)
    make_run(tmp_path / "r", "mxattention", P1, 0, None)
    with pytest.raises(UserError, match="lowbit-video evaluate"):
        collect([tmp_path / "r"])


def test_unpaired_and_foreign_baseline_runs_are_left_out(tmp_path: Path):
    out = tmp_path / "r"
    make_run(out, "fp16", P1, 0, dict(BASE_PAIRED))
    make_run(out, "fp16", P2, 0, dict(BASE_PAIRED))
    make_run(out, "mxattention", P1, 0, {"psnr": 20.0, "ssim": 0.8, "cosine": 0.9, "lpips": 0.1})
    make_run(out, "mxattention", P2, 0, {"psnr": 99.0, "ssim": 0.1, "cosine": 0.1, "lpips": 0.9}, paired_with=None)
    comp = collect([out])
    row = comp.models[0].row("mxattention")
    assert row.n == 1 and row.values["psnr"] == pytest.approx(20.0)     # the unpaired run is not averaged in
    assert any("no fp16 run" in w for w in comp.warnings)


def test_runs_dropped_for_damage_are_named_with_the_reason(tmp_path: Path):
    out = tmp_path / "r"
    make_run(out, "fp16", P1, 0, dict(BASE_PAIRED))
    make_run(out, "fp16", P2, 0, dict(BASE_PAIRED))
    make_run(out, "mxattention", P1, 0, {"psnr": 20.0, "ssim": 0.8, "cosine": 0.9, "lpips": 0.1})
    bad_metrics = make_run(out, "mxattention", P2, 0, {"psnr": 99.0, "ssim": 0.1, "cosine": 0.1, "lpips": 0.9})
    (bad_metrics / "metrics.json").write_text('{"metrics": {"psnr": 9')          # cut short
    bad_meta = make_run(out, "nvfp4", P1, 0, {"psnr": 30.0, "ssim": 0.8, "cosine": 0.9, "lpips": 0.1})
    (bad_meta / "meta.json").write_text("{")
    comp = collect([out])
    row = comp.models[0].row("mxattention")
    assert row.n == 1 and row.values["psnr"] == pytest.approx(20.0)
    reasons = {x["dir"]: x["reason"] for x in comp.left_out}
    assert reasons[str(bad_metrics.resolve())] == "unreadable metrics.json (JSONDecodeError)"
    assert reasons[str(bad_meta.resolve())].startswith("damaged run: unreadable meta.json")
    assert any(w.startswith("1 run left out (unreadable metrics.json") and str(bad_metrics.resolve()) in w
               for w in comp.warnings), comp.warnings
    assert any(w.startswith("1 run left out (damaged run") for w in comp.warnings), comp.warnings


def test_stale_baseline_is_left_out(tmp_path: Path):
    out = tmp_path / "r"
    make_run(out, "fp16", P1, 0, dict(BASE_PAIRED))
    make_run(out, "mxattention", P1, 0, {"psnr": 20.0, "ssim": 0.8, "cosine": 0.9, "lpips": 0.1})
    make_run(out, "mxattention", P2, 0, {"psnr": 20.0, "ssim": 0.8, "cosine": 0.9, "lpips": 0.1}, paired_with=None)
    # regenerate the fp16 run with other frames after evaluation
    d = runstore.run_dir(out, MODEL, "fp16", P1, 0)
    meta = runstore.read_meta(d)
    meta["frames_sha256"] = "0" * 64
    runstore.atomic_write_json(d / "meta.json", meta)
    comp = collect([out])
    assert comp.models[0].row("mxattention") is None
    assert any("regenerated" in w for w in comp.warnings)


def test_baseline_found_beside_a_given_run(grid: Path):
    comp = collect([grid / MODEL / "mxattention"])
    mc = comp.models[0]
    assert mc.baseline_row is not None and mc.baseline_row.n == 2
    assert [r.recipe for r in mc.rows] == ["mxattention"]
    assert mc.best == {}   # a single quantized row: nothing to rank


def test_missing_baseline_is_an_error(grid: Path):
    with pytest.raises(UserError, match="--baseline nvfp4"):
        collect([grid], baseline="nvfp4")


def test_two_models_get_two_tables(grid: Path):
    make_run(grid, "fp16", P1, 0, {**BASE_PAIRED, "imaging_quality": 0.5}, model="wan2.1-t2v-1.3b")
    make_run(grid, "mxattention", P1, 0, {"psnr": 25.0, "ssim": 0.7, "cosine": 0.9, "lpips": 0.2,
                                          "imaging_quality": 0.4}, model="wan2.1-t2v-1.3b")
    comp = collect([grid])
    assert [m.model for m in comp.models] == [MODEL, "wan2.1-t2v-1.3b"]
    wan = comp.model("wan2.1-t2v-1.3b")
    assert "adherence" not in wan.columns
    assert wan.row("mxattention").values["psnr"] == pytest.approx(25.0)
    md = render_markdown(comp)
    assert md.count("### ") == 2


# --------------------------------------------------------------------------------- renderers


def test_markdown_shape(grid: Path):
    md = render_markdown(collect([grid]))
    lines = md.splitlines()
    table = [ln for ln in lines if ln.startswith("|")]
    assert table[0] == ("| Method | Subject ↑ | Imaging ↑ | Aesthetic ↑ | Flicker ↑ | Cosine ↑ | SSIM ↑ | PSNR ↑ "
                        "| LPIPS ↓ | Adherence ↑ | n |")
    assert len(table) == 2 + 3          # header, rule, fp16, mxattention, mxfp4-ocp
    assert table[2] == "| fp16 | 0.9600 | 0.7100 | 0.6100 | 0.9700 | – | – | – | – | 0.5000 | 2 |"
    assert table[3] == ("| mxattention | 0.9500 | **0.7000** | **0.6200** | **0.9700** | **0.9800** | **0.8500** "
                        "| **21.00** | 0.3500 | **1.0000** | 2 |")
    assert table[4] == ("| mxfp4-ocp | **0.9700** | 0.6200 | n/a | 0.9700 | 0.9400 | 0.5500 | 15.50 | **0.1500** "
                        "| 0.5000 | 2 |")
    notes = md[md.index("n/a:"):]
    assert "Aesthetic" in notes and AESTH_MISSING in notes and "mxfp4-ocp" in notes


def test_markdown_fixed_rows_labels_and_extra_columns(grid: Path):
    comp = collect([grid])
    md = render_markdown(comp, MODEL, rows=[("Full", "mxattention"), ("w/o UOS", "mxattention-no-uos"),
                                            ("OCP MXFP4", "mxfp4-ocp")],
                         columns=["cosine", "ssim", "psnr"], include_baseline=False,
                         extra_columns=[("UOS", {"mxattention": "✓", "mxfp4-ocp": "–"})],
                         label_header="Configuration", title=False)
    table = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert table[0] == "| Configuration | UOS | Cosine ↑ | SSIM ↑ | PSNR ↑ | n |"
    assert table[2] == "| Full | ✓ | **0.9800** | **0.8500** | **21.00** | 2 |"
    assert table[3] == "| w/o UOS |  | n/a | n/a | n/a | 0 |"
    assert table[4] == "| OCP MXFP4 | – | 0.9400 | 0.5500 | 15.50 | 2 |"
    assert "no scored runs" in md and "fp16 |" not in md
    rows = rows_json(comp, MODEL, [("Full", "mxattention"), ("w/o UOS", "mxattention-no-uos")],
                     columns=["cosine", "psnr"])
    assert rows[0] == {"config": "Full", "recipe": "mxattention", "n": 2, "cosine": pytest.approx(0.98),
                       "psnr": pytest.approx(21.0)}
    assert rows[1]["n"] == 0 and rows[1]["cosine"] == {"unavailable": "no scored runs"}


def test_csv_shape(grid: Path):
    text = render_csv(collect([grid]))
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["model", "recipe", "role", "n", "subject_consistency", "imaging_quality", "aesthetic_quality",
                       "temporal_flickering", "cosine", "ssim", "psnr", "lpips", "adherence", "note"]
    assert len(rows) == 4 and all(len(r) == len(rows[0]) for r in rows)
    head = rows[0]
    fp16, mx, ocp = (dict(zip(head, r)) for r in rows[1:])
    assert fp16["recipe"] == "fp16" and fp16["role"] == "baseline" and fp16["psnr"] == ""
    assert float(fp16["subject_consistency"]) == pytest.approx(0.96)
    assert float(mx["psnr"]) == pytest.approx(21.0) and mx["note"] == ""
    assert ocp["aesthetic_quality"] == "" and AESTH_MISSING in ocp["note"]
    assert float(ocp["lpips"]) == pytest.approx(0.15)


def test_json_shape(grid: Path):
    doc = to_json(collect([grid]))
    json.dumps(doc, allow_nan=False)
    assert doc["baseline"] == "fp16"
    m = doc["models"][0]
    assert m["model"] == MODEL and m["n_pairs"] == 2
    assert {(p["prompt"], p["seed"]) for p in m["pairs"]} == {(P1, 0), (P2, 0)}
    assert m["baseline_row"]["recipe"] == "fp16" and m["baseline_row"]["n"] == 2
    assert "psnr" not in m["baseline_row"]
    assert [r["recipe"] for r in m["rows"]] == ["mxattention", "mxfp4-ocp"]
    for r in m["rows"]:
        for k in ("psnr", "ssim", "cosine"):
            assert isinstance(r[k], float)
        for k in ("lpips", "subject_consistency", "imaging_quality", "aesthetic_quality"):
            assert isinstance(r[k], float) or set(r[k]) == {"unavailable"}
        assert r["n"] == 2 and len(r["pairs"]) == 2
    assert m["rows"][1]["aesthetic_quality"]["unavailable"].startswith(AESTH_MISSING)
    assert m["best"]["lpips"] == "mxfp4-ocp" and m["best"]["psnr"] == "mxattention"


# -------------------------------------------------------------------------------------- CLI


def test_cli_json(grid: Path):
    p = cli("compare", str(grid), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    row = doc["models"][0]["rows"][0]
    assert row["recipe"] == "mxattention" and row["psnr"] == pytest.approx(21.0)
    assert doc["models"][0]["best"]["lpips"] == "mxfp4-ocp"


def test_cli_formats_out_and_warnings(grid: Path, tmp_path: Path):
    make_run(grid, "nvfp4", P1, 0, None)      # no metrics.json: left out, warning on stderr
    target = tmp_path / "t" / "table.md"
    p = cli("compare", str(grid), "--out", str(target))
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    assert "warning:" in p.stderr and "no metrics.json" in p.stderr
    text = target.read_text()
    assert "| mxattention |" in text and "**21.00**" in text and "nvfp4" not in text.split("n/a:")[0]
    assert not [x for x in target.parent.iterdir() if runstore.is_temp(x)]
    p = cli("compare", str(grid), "--format", "csv")
    assert p.returncode == 0 and p.stdout.splitlines()[0].startswith("model,recipe,role,n,")
    p = cli("compare", str(grid))
    assert p.returncode == 0 and "mxattention" in p.stdout and "21.00" in p.stdout and "n/a" in p.stdout


@pytest.mark.parametrize("args, needle", [
    (["--format", "xml"], "--format"),
    (["--baseline", "nope"], "--baseline nope"),
    (["--json", "--format", "md"], "--json"),
])
def test_cli_user_errors(grid: Path, args, needle):
    p = cli("compare", str(grid), *args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]


def test_cli_no_runs_and_no_metrics(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    p = cli("compare", str(tmp_path / "empty"))
    assert p.returncode == 2 and "no complete runs" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    make_run(tmp_path / "r", "fp16", P1, 0, None)
    p = cli("compare", str(tmp_path / "r"), "--json")
    assert p.returncode == 2 and "lowbit-video evaluate" in p.stderr and p.stdout == ""


def test_terminal_table_leaves_out_columns_that_are_na_for_every_row(tmp_path: Path):
    from lowbit_video.compare import render_text

    missing = {"unavailable": "missing torch/hub/checkpoints/alexnet-owt-7be5be79.pth"}
    make_run(tmp_path, "fp16", P1, 0, {**BASE_PAIRED, "imaging_quality": 0.70})
    make_run(tmp_path, "mxattention", P1, 0, {"psnr": 20.0, "ssim": 0.8, "cosine": 0.99, "lpips": missing,
                                              "imaging_quality": 0.69})
    text = render_text(collect([tmp_path]))
    header = next(line for line in text.splitlines() if "recipe" in line and "PSNR" in line)
    assert "LPIPS" not in header and "Imaging" in header
    note = next(line for line in text.splitlines() if "not shown (n/a for every recipe)" in line)
    assert "LPIPS" in note and "Imaging" not in note and "PSNR" not in note
    # md keeps every column
    assert "LPIPS" in render_markdown(collect([tmp_path])).split("\n| --- ")[0]
