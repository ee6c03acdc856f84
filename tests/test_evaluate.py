"""evaluate_runs and `lowbit-video evaluate` on small run directories written the way generate writes
them (generate.write_run), plus one end-to-end test on runs of the shipped model."""

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from lowbit_video import evaluate as ev
from lowbit_video import generate, runstore
from lowbit_video.errors import UserError
from lowbit_video.evaluate import evaluate_runs
from lowbit_video.metrics import weights
from lowbit_video.metrics.registry import list_metrics
from lowbit_video.models.tiny_shapes.clips import render_clip

PROMPT = "a red circle moving right on a black background"
PAIRED = ("psnr", "ssim", "cosine")
LOCAL = "psnr,ssim,cosine,adherence"


def make_run(out, recipe, frames, *, prompt=PROMPT, seed=0, steps=2, model="tiny-shapes", family="tiny-shapes"):
    d = runstore.run_dir(out, model, recipe, prompt, seed)
    meta = {"format": "lowbit-video run", "format_version": 1, "model": {"name": model, "family": family},
            "recipe": {"name": recipe}, "prompt": prompt, "seed": seed, "steps": steps, "guidance": 1.0,
            "size": {"height": frames.shape[1], "width": frames.shape[2], "frames": frames.shape[0]}, "fps": 8}
    generate.write_run(SimpleNamespace(dir=d), frames, meta=meta)
    return d


def base_clip(seed=0):
    return (render_clip(PROMPT, seed=seed) * 255 + 0.5).astype(np.uint8)


def shifted(u8, delta):
    return np.clip(u8.astype(int) + delta, 0, 255).astype(np.uint8)


def psnr_by_hand(a, b):
    a, b = a / 255.0, b / 255.0
    return float(np.mean([10 * math.log10(1.0 / np.mean((x - y) ** 2)) for x, y in zip(a, b)]))


@pytest.fixture
def pair(tmp_path):
    out = tmp_path / "runs"
    base = base_clip()
    q = shifted(base, 12)
    return out, make_run(out, "fp16", base), make_run(out, "mxattention", q), base, q


@pytest.fixture
def fake_vbench(monkeypatch):
    """Stand-ins for the VBench subprocess and its weight checks (both tested by their own tests)."""
    from lowbit_video.metrics import vbench

    calls = []

    def score_videos(videos, dims, root):
        calls.append(([v.key for v in videos], list(dims)))
        return {v.key: {d: 0.75 for d in dims} for v in videos}

    def dimension_unavailable(dim, root):
        return None if dim == "temporal_flickering" else f"missing weights for {dim}"

    monkeypatch.setattr(vbench, "score_videos", score_videos)
    monkeypatch.setattr(vbench, "dimension_unavailable", dimension_unavailable)
    return calls


def paired_compute(monkeypatch, name, fn):
    """Make the registered paired metric `name` compute fn(frames, baseline frames)."""
    from lowbit_video.metrics import registry

    specs = tuple(dataclasses.replace(s, compute=registry.against_baseline(fn)) if s.name == name else s
                  for s in registry._SPECS)
    monkeypatch.setattr(registry, "_SPECS", specs)


def by_recipe(results):
    return {r["run"]["recipe"]: r for r in results}


def test_paired_metrics_against_the_fp16_run(pair, tmp_path):
    out, fp16_dir, q_dir, base, q = pair
    res = by_recipe(evaluate_runs([out], metrics=[LOCAL], weights_dir=str(tmp_path / "w")))
    m = res["mxattention"]["metrics"]
    assert m["psnr"] == pytest.approx(psnr_by_hand(q, base), abs=1e-9)
    assert 0 < m["ssim"] < 1 and 0.9 < m["cosine"] < 1
    assert m["adherence"] == 1.0  # the rendered clip is exactly what the prompt asks for
    assert res["mxattention"]["details"]["adherence"]["shape"] == {"detected": "circle", "ok": True}
    assert res["mxattention"]["baseline"] == {
        "recipe": "fp16", "dir": str(fp16_dir.relative_to(out)),
        "frames_sha256": runstore.read_meta(fp16_dir)["frames_sha256"]}
    for name in PAIRED:
        assert res["fp16"]["metrics"][name] == {"unavailable": "baseline run"}
    stored = json.loads((q_dir / "metrics.json").read_text())
    assert stored["format"] == "lowbit-video metrics" and stored["format_version"] == 1
    assert stored["run"] == {"model": "tiny-shapes", "recipe": "mxattention", "prompt": PROMPT, "seed": 0,
                             "steps": 2, "frames_sha256": runstore.read_meta(q_dir)["frames_sha256"]}
    assert stored["metrics"] == m
    assert (fp16_dir / "metrics.json").is_file()


def test_defaults_without_weights_write_the_weight_free_metrics(pair, tmp_path, fake_vbench):
    out, _, q_dir, _, _ = pair
    evaluate_runs([out], weights_dir=str(tmp_path / "empty"))
    m = json.loads((q_dir / "metrics.json").read_text())["metrics"]
    assert set(m) == {s.name for s in list_metrics()}
    for name in (*PAIRED, "adherence", "temporal_flickering"):
        assert isinstance(m[name], float), name
    assert "alexnet-owt-7be5be79.pth" in m["lpips"]["unavailable"]
    assert m["imaging_quality"] == {"unavailable": "missing weights for imaging_quality"}
    ((keys, dims),) = fake_vbench  # one VBench call for all runs, only the dimension that can run
    assert dims == ["temporal_flickering"]
    assert sorted(keys) == sorted(str(p.resolve()) for p in out.rglob("seed-0"))


def test_a_failing_vbench_subprocess_is_reported_not_fatal(pair, tmp_path, monkeypatch, fake_vbench):
    from lowbit_video.metrics import vbench

    out, _, q_dir, _, _ = pair

    def crash(videos, dims, root):
        raise RuntimeError("worker died\nTraceback ...")

    monkeypatch.setattr(vbench, "score_videos", crash)
    evaluate_runs([q_dir], metrics=["psnr", "temporal_flickering"], weights_dir=str(tmp_path))
    m = json.loads((q_dir / "metrics.json").read_text())["metrics"]
    assert isinstance(m["psnr"], float)
    assert m["temporal_flickering"] == {"unavailable": "vbench failed: RuntimeError: worker died"}


def test_nan_scores_become_unavailable(pair, tmp_path, monkeypatch):
    out, _, q_dir, _, _ = pair
    paired_compute(monkeypatch, "ssim", lambda a, b: float("nan"))
    evaluate_runs([out], metrics=["ssim"], weights_dir=str(tmp_path))
    text = (q_dir / "metrics.json").read_text()
    assert "NaN" not in text
    assert json.loads(text)["metrics"]["ssim"] == {"unavailable": "non-finite score (nan)"}


def test_second_run_skips_and_new_metrics_are_merged(pair, tmp_path):
    out, _, q_dir, _, _ = pair
    w = str(tmp_path / "w")
    evaluate_runs([out], metrics=["psnr"], weights_dir=w)
    first = json.loads((q_dir / "metrics.json").read_text())
    res = evaluate_runs([out], metrics=["psnr"], weights_dir=w)
    assert {r["status"] for r in res} == {"skipped"}
    assert json.loads((q_dir / "metrics.json").read_text()) == first
    res = by_recipe(evaluate_runs([out], metrics=["ssim"], weights_dir=w))
    assert res["mxattention"]["status"] == "scored"
    merged = json.loads((q_dir / "metrics.json").read_text())
    assert merged["metrics"]["psnr"] == first["metrics"]["psnr"] and isinstance(merged["metrics"]["ssim"], float)
    assert merged["created"] == first["created"]


def test_a_changed_baseline_recomputes_paired_metrics(pair, tmp_path):
    out, fp16_dir, q_dir, base, q = pair
    evaluate_runs([out], metrics=["psnr"], weights_dir=str(tmp_path))
    new_base = shifted(base, -5)
    runstore.reset_run_dir(fp16_dir)
    make_run(out, "fp16", new_base)
    res = by_recipe(evaluate_runs([out], metrics=["psnr"], weights_dir=str(tmp_path)))
    assert res["mxattention"]["status"] == "scored"
    assert res["mxattention"]["metrics"]["psnr"] == pytest.approx(psnr_by_hand(q, new_base), abs=1e-9)


def test_unavailable_lpips_is_recomputed_once_its_weights_appear(pair, tmp_path, monkeypatch):
    import torch
    import torchvision

    out, _, q_dir, _, _ = pair
    root = tmp_path / "w"
    evaluate_runs([out], metrics=["lpips"], weights_dir=str(root))
    assert "unavailable" in json.loads((q_dir / "metrics.json").read_text())["metrics"]["lpips"]
    assert {r["status"] for r in evaluate_runs([out], metrics=["lpips"], weights_dir=str(root))} == {"skipped"}

    path = root / "torch/hub/checkpoints/alexnet-owt-7be5be79.pth"
    path.parent.mkdir(parents=True)
    torch.save(torchvision.models.alexnet(weights=None).state_dict(), path)
    # the random file cannot carry the 7be5be79 prefix: accept its own hash for this test
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setattr(weights, "MANIFEST", tuple(
        dataclasses.replace(w, sha256=digest) if w.key == "lpips-alexnet" else w for w in weights.MANIFEST))
    res = by_recipe(evaluate_runs([out], metrics=["lpips"], weights_dir=str(root)))
    assert res["mxattention"]["status"] == "scored"
    assert res["mxattention"]["metrics"]["lpips"] > 0
    assert res["fp16"]["metrics"]["lpips"] == {"unavailable": "baseline run"}


def test_no_baseline_and_the_pairing_rule(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    base = base_clip()
    q_dir = make_run(a, "mxattention", shifted(base, 3))
    make_run(a, "fp16", base, steps=3)  # other steps: not its baseline
    res = by_recipe(evaluate_runs([q_dir], metrics=["psnr"], weights_dir=str(tmp_path)))
    assert res["mxattention"]["metrics"]["psnr"] == {
        "unavailable": "no fp16 run of the same model, prompt, seed and steps"}
    other = make_run(b, "fp16", base)  # same settings, another output root: found when given
    res = by_recipe(evaluate_runs([q_dir, other], metrics=["psnr"], weights_dir=str(tmp_path)))
    assert isinstance(res["mxattention"]["metrics"]["psnr"], float)
    assert res["mxattention"]["baseline"]["dir"] == str(Path("..") / other.relative_to(tmp_path))


def test_adherence_only_for_tiny_shapes_runs(tmp_path, fake_vbench):
    d = make_run(tmp_path / "r", "fp16", base_clip(), model="wan-small", family="wan")
    res = evaluate_runs([d], metrics=None, weights_dir=str(tmp_path / "w"))
    assert "adherence" not in res[0]["metrics"]
    res = evaluate_runs([d], metrics=["adherence"], weights_dir=str(tmp_path / "w"))
    assert "tiny-shapes" in res[0]["metrics"]["adherence"]["unavailable"]


def test_interrupted_evaluate_leaves_no_half_written_file(pair, tmp_path, monkeypatch):
    out, _, q_dir, _, _ = pair
    evaluate_runs([q_dir], metrics=["psnr"], weights_dir=str(tmp_path))
    before = (q_dir / "metrics.json").read_bytes()

    def interrupt(a, b):
        raise KeyboardInterrupt

    paired_compute(monkeypatch, "ssim", interrupt)
    with pytest.raises(KeyboardInterrupt):
        evaluate_runs([q_dir], metrics=["psnr", "ssim"], weights_dir=str(tmp_path))
    assert (q_dir / "metrics.json").read_bytes() == before
    assert [p.name for p in q_dir.iterdir() if runstore.is_temp(p)] == []

    real_write = runstore.atomic_write_json

    def die_while_writing(path, obj):
        with runstore.atomic_path(path) as tmp:
            tmp.write_text(json.dumps(obj)[:50])  # half a file, then the interrupt
            raise KeyboardInterrupt

    paired_compute(monkeypatch, "ssim", lambda a, b: 0.5)
    monkeypatch.setattr(runstore, "atomic_write_json", die_while_writing)
    with pytest.raises(KeyboardInterrupt):
        evaluate_runs([q_dir], metrics=["ssim"], weights_dir=str(tmp_path))
    monkeypatch.setattr(runstore, "atomic_write_json", real_write)
    assert (q_dir / "metrics.json").read_bytes() == before
    assert [p.name for p in q_dir.iterdir() if runstore.is_temp(p)] == []


def test_user_errors(tmp_path):
    with pytest.raises(UserError, match="unknown metric 'nope'"):
        ev.resolve_metrics(["psnr,nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no complete runs"):
        evaluate_runs([tmp_path / "empty"])
    with pytest.raises(UserError, match="no such file"):
        evaluate_runs([tmp_path / "absent"])


def test_metric_lists_accept_commas_and_repeats():
    assert ev.resolve_metrics(["psnr,ssim", "cosine", "psnr"]) == (["psnr", "ssim", "cosine"], True)
    names, explicit = ev.resolve_metrics(None)
    assert not explicit and names[:6] == ["psnr", "ssim", "cosine", "mse", "lpips", "adherence"]
    assert "temporal_flickering" in names and "imaging_quality" in names


# ------------------------------------------------------------------------------------------ the CLI


def _cli():
    from lowbit_video.cli import app

    return app


def test_cli_json_and_errors(pair, tmp_path):
    out, _, _, _, _ = pair
    runner = CliRunner()
    res = runner.invoke(_cli(), ["evaluate", str(out), "--metrics", "psnr", "--metrics", "cosine,ssim",
                                 "--weights-dir", str(tmp_path / "w"), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["scored"] == 2 and data["skipped"] == 0
    assert {r["run"]["recipe"] for r in data["runs"]} == {"fp16", "mxattention"}
    res = runner.invoke(_cli(), ["evaluate", str(out), "--metrics", "bogus"])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and "unknown metric 'bogus'" in res.stderr
    (tmp_path / "nothing").mkdir()
    res = runner.invoke(_cli(), ["evaluate", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "no complete runs" in res.stderr and "Traceback" not in res.output


def test_cli_table(pair, tmp_path):
    out, _, _, _, _ = pair
    res = CliRunner().invoke(_cli(), ["evaluate", str(out), "--metrics", "psnr,lpips", "--weights-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    # stderr is no terminal here (as in CI logs): a timestamped line per run instead of a progress bar
    assert "evaluate: 2 runs to do" in res.stderr and res.stderr.count("evaluate: run ") == 2
    assert "evaluate: run 2/2 scored" in res.stderr
    assert "mxattention" in res.stdout and "psnr" in res.stdout
    assert "lpips" in res.stdout and "alexnet-owt-7be5be79.pth" in res.stdout  # the reason is shown


def test_metrics_listing(tmp_path):
    res = CliRunner().invoke(_cli(), ["metrics", "--weights-dir", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout)["metrics"]}
    assert rows["psnr"]["status"] == "available" and rows["psnr"]["kind"] == "paired"
    assert rows["lpips"]["weights"] == ["lpips-alexnet"] and "unavailable" in rows["lpips"]["status"]
    assert rows["adherence"]["models"] == ["tiny-shapes"]


# -------------------------------------------------------------------------- the shipped model, end to end


@pytest.mark.slow
def test_real_runs_of_the_shipped_model(tmp_path):
    # one denoising step: the same code paths as more steps (emulated MX attention dominates: ~20 s on an
    # idle 2-core CPU, several times that on a shared one)
    out = tmp_path / "runs"
    generate.generate(generate.GenerateConfig(recipes=["fp16", "mxattention"], prompts=[PROMPT], steps=1, out=out))
    res = by_recipe(evaluate_runs([out], weights_dir=str(tmp_path / "no-weights")))
    q = res["mxattention"]["metrics"]
    for name in (*PAIRED, "adherence"):
        assert isinstance(q[name], float), (name, q[name])
    assert 0 < q["ssim"] <= 1 and 0 < q["cosine"] <= 1 and q["psnr"] > 10
    assert "alexnet-owt-7be5be79.pth" in q["lpips"]["unavailable"]
    tf = q["temporal_flickering"]  # the real VBench formula in its subprocess, when the VBench stack is installed
    assert isinstance(tf, float) and 0 < tf <= 1 or "unavailable" in tf
    assert res["fp16"]["metrics"]["psnr"] == {"unavailable": "baseline run"}
    for r in res.values():
        assert json.loads((Path(r["dir"]) / "metrics.json").read_text())["metrics"] == r["metrics"]


# ------------------------------------------------------------------------- damage, typos, concurrency


def test_an_unknown_baseline_is_refused_before_any_write(pair, tmp_path):
    out, _, q_dir, _, _ = pair
    evaluate_runs([out], metrics=["psnr"], weights_dir=str(tmp_path))
    before = (q_dir / "metrics.json").read_bytes()
    with pytest.raises(UserError, match="--baseline nosuchrecipe: no such recipe .*recipes found: fp16, mxattention"):
        evaluate_runs([out], metrics=["psnr"], weights_dir=str(tmp_path), baseline="nosuchrecipe")
    assert (q_dir / "metrics.json").read_bytes() == before
    res = CliRunner().invoke(_cli(), ["evaluate", str(out), "--baseline", "nosuchrecipe"])
    assert res.exit_code == 2 and res.stderr.startswith("error: --baseline nosuchrecipe") and "Traceback" not in res.output


def test_scores_whose_baseline_is_gone_are_kept_not_destroyed(pair, tmp_path):
    import shutil

    out, fp16_dir, q_dir, base, q = pair
    evaluate_runs([out], metrics=["psnr", "cosine"], weights_dir=str(tmp_path))
    stored = json.loads((q_dir / "metrics.json").read_text())
    shutil.rmtree(fp16_dir)
    rep = ev.EvalReporter()
    (res,) = evaluate_runs([out], metrics=["psnr", "ssim"], weights_dir=str(tmp_path), overwrite=True, reporter=rep)
    now = json.loads((q_dir / "metrics.json").read_text())
    assert now["metrics"]["psnr"] == stored["metrics"]["psnr"] == pytest.approx(psnr_by_hand(q, base), abs=1e-9)
    assert now["metrics"]["cosine"] == stored["metrics"]["cosine"]
    assert now["baseline"] == stored["baseline"]
    assert now["metrics"]["ssim"] == {"unavailable": "no fp16 run of the same model, prompt, seed and steps"}
    assert any(w.startswith("1 run keeps the paired scores stored against its fp16 run") for w in rep.warnings)


@pytest.mark.parametrize("damage", [b"", b"PK\x03\x04" + bytes(96)])   # 0 bytes; a truncated zip of 100 bytes
def test_a_damaged_run_is_reported_and_the_others_are_scored(tmp_path, damage):
    out = tmp_path / "runs"
    base = base_clip()
    make_run(out, "fp16", base)
    ok = make_run(out, "mxattention", shifted(base, 5))
    hurt = make_run(out, "nvfp4", shifted(base, 9))
    (hurt / "frames.npz").write_bytes(damage)
    rep = ev.EvalReporter()
    res = by_recipe(evaluate_runs([out], metrics=["psnr", "adherence"], weights_dir=str(tmp_path), reporter=rep))
    assert res["nvfp4"]["status"] == "damaged" and "frames.npz: damaged" in res["nvfp4"]["error"]
    assert not (hurt / "metrics.json").exists()
    assert res["mxattention"]["status"] == "scored" and isinstance(res["mxattention"]["metrics"]["psnr"], float)
    assert (ok / "metrics.json").is_file()
    assert len([w for w in rep.warnings if "not scored" in w and "nvfp4" in w]) == 1
    res = CliRunner().invoke(_cli(), ["evaluate", str(out), "--metrics", "psnr", "--weights-dir", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["damaged"] == 1 and len(doc["warnings"]) == 1 and "Traceback" not in res.output
    assert res.stderr.startswith("warning: ") and "nvfp4" in res.stderr and "frames.npz: damaged" in res.stderr
    res = CliRunner().invoke(_cli(), ["evaluate", str(out), "--metrics", "psnr", "--weights-dir", str(tmp_path)])
    assert res.exit_code == 0 and "1 damaged (see the warnings)" in res.stdout, res.output


def test_a_damaged_baseline_or_meta_isolates_only_its_runs(tmp_path):
    out = tmp_path / "runs"
    base = base_clip()
    fp16 = make_run(out, "fp16", base)
    q = make_run(out, "mxattention", shifted(base, 5))
    other_prompt = "a blue square static on a white background"
    fp16_b = make_run(out, "fp16", base, prompt=other_prompt)
    q_b = make_run(out, "mxattention", shifted(base, 7), prompt=other_prompt)
    (fp16 / "frames.npz").write_bytes((fp16 / "frames.npz").read_bytes()[:100])
    meta_hurt = make_run(out, "nvfp4", base)
    (meta_hurt / "meta.json").write_text("{ truncated")
    rep = ev.EvalReporter()
    res = {r["dir"]: r for r in evaluate_runs([out], metrics=["psnr"], weights_dir=str(tmp_path), reporter=rep)}
    assert res[str(q.resolve())]["status"] == "damaged" and str(fp16 / "frames.npz") in res[str(q.resolve())]["error"]
    assert isinstance(res[str(q_b.resolve())]["metrics"]["psnr"], float)
    assert res[str(meta_hurt.resolve())]["status"] == "damaged"
    assert "unreadable meta.json" in res[str(meta_hurt.resolve())]["error"]
    assert any("nvfp4" in w and "damaged run left out" in w for w in rep.warnings)
    assert res[str(fp16_b.resolve())]["status"] == "scored"


def test_unwritable_run_folders_are_an_error_before_scoring(pair, tmp_path, monkeypatch):
    out, _, q_dir, _, _ = pair
    real = runstore.output_problem
    monkeypatch.setattr(runstore, "output_problem",
                        lambda p, is_dir: "cannot write there (Read-only file system)" if "mxattention" in str(p) else real(p, is_dir=is_dir))
    with pytest.raises(UserError, match="cannot write there .*metrics.json cannot be written"):
        evaluate_runs([out], metrics=["psnr"], weights_dir=str(tmp_path))
    assert not list(out.rglob("metrics.json"))


def test_a_run_claimed_by_another_evaluate_is_left_to_it(pair, tmp_path):
    out, fp16_dir, q_dir, _, _ = pair
    with runstore.claim_run(q_dir, "evaluate"):
        rep = ev.EvalReporter()
        res = by_recipe(evaluate_runs([out], metrics=["psnr"], weights_dir=str(tmp_path), reporter=rep))
    assert res["mxattention"]["status"] == "claimed" and not (q_dir / "metrics.json").exists()
    assert res["fp16"]["status"] == "scored"
    assert any("being scored by another process" in w for w in rep.warnings)
    res = by_recipe(evaluate_runs([out], metrics=["psnr"], weights_dir=str(tmp_path)))  # claim released
    assert res["mxattention"]["status"] == "scored" and res["fp16"]["status"] == "skipped"
