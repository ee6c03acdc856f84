"""VBench integration (lowbit_video.metrics.vbench + vbench_worker), offline, on CPU.

The subprocess tests run the real vbench 0.1.5 package (installed by scripts/install-vbench.sh);
without it they are skipped with that reason. Learned-weight dimensions run on random weights of the
real architectures under the real file names (tests/vbench_fixtures.py, notes §7): structure only.
"""

from __future__ import annotations

import importlib.util
import json
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import vbench_fixtures as fx
from lowbit_video.metrics import vbench as vb
from lowbit_video.metrics import vbench_worker as worker

HAVE_VBENCH = all(importlib.util.find_spec(m) is not None for m in ("vbench", "decord", "cv2"))
needs_vbench = pytest.mark.skipif(not HAVE_VBENCH, reason="VBench stack not installed (scripts/install-vbench.sh)")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Sockets are blocked in the test process; the worker blocks its own (checked below)."""
    def refuse(*a, **k):
        raise AssertionError("test tried to use the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return fx.make_videos(tmp_path_factory.mktemp("videos"))


def _is_unavailable(v) -> bool:
    return isinstance(v, dict) and set(v) == {"unavailable"} and isinstance(v["unavailable"], str) \
        and "\n" not in v["unavailable"] and v["unavailable"].strip() != ""


# ----------------------------------------------------------------------------- availability


def test_suite_only_dimensions_match_vbench_and_need_a_prompt_of_its_suite(tmp_path):
    # the list VBench itself rejects in custom_input mode (read from the installed source when present)
    expected = {"object_class", "multiple_objects", "scene", "appearance_style", "color", "spatial_relationship"}
    assert set(vb.STANDARD_ONLY) == expected
    spec = importlib.util.find_spec("vbench")
    if spec is not None:
        src = Path(spec.origin).read_text()
        block = src[src.index("def check_dimension_requires_extra_info"):src.index("def build_full_info_json")]
        for dim in expected:
            assert f"'{dim}'" in block
    color_prompt = {"prompt_en": "a red bicycle", "dimension": ["color"], "auxiliary_info": {"color": {"color": "red"}}}
    for dim in expected:
        assert dim in vb.VBENCH_DIMENSIONS and dim not in vb.CUSTOM_DIMENSIONS
        reason = vb.suite_reason(dim, None)  # a free-text prompt
        assert "standard mode" in reason and f"--prompts vbench:{dim}" in reason and "\n" not in reason
        assert (vb.suite_reason(dim, color_prompt) is None) == (dim == "color")
    assert all(vb.suite_reason(dim, None) is None for dim in vb.CUSTOM_DIMENSIONS)
    assert "unknown VBench dimension" in vb.dimension_unavailable("not_a_dim", tmp_path)


def test_free_text_videos_get_no_suite_only_dimension_and_suites_reach_the_worker(tmp_path, videos, monkeypatch):
    requests = []

    def worker(todo, dims, root, **kw):
        requests.append(([(v.key, v.suite) for v in todo], list(dims)))
        return {"scores": {v.key: {d: 0.5 for d in dims} for v in todo}}

    monkeypatch.setattr(vb, "dimension_unavailable", lambda dim, root, **kw: None)
    monkeypatch.setattr(vb, "_run_worker", worker)
    entry = {"prompt_en": "a red bicycle", "dimension": ["color"], "auxiliary_info": {"color": {"color": "red"}}}
    vids = [vb.VBenchVideo("free", videos["static"], "a cat"), vb.VBenchVideo("suite", videos["moving"],
                                                                              "a red bicycle", suite=entry)]
    res = vb.score_videos(vids, ["temporal_flickering", "color", "scene"], tmp_path)
    assert res["suite"]["color"] == 0.5 and res["suite"]["temporal_flickering"] == 0.5
    assert _is_unavailable(res["suite"]["scene"]) and "does not list this prompt for scene" in res["suite"]["scene"][
        "unavailable"]
    assert res["free"]["temporal_flickering"] == 0.5
    assert _is_unavailable(res["free"]["color"]) and "vbench:color" in res["free"]["color"]["unavailable"]
    assert requests == [([("free", None), ("suite", entry)], ["temporal_flickering", "color"])]


def test_standard_rounds_name_videos_as_vbench_looks_for_them():
    entry = {"prompt_en": "a red bicycle", "dimension": ["color"]}
    vids = [{"key": f"k{i}", "mp4": f"/v{i}.mp4", "prompt": "a red bicycle", "suite": entry} for i in range(7)]
    vids.append({"key": "free", "mp4": "/f.mp4", "prompt": "a cat", "suite": None})
    rounds = worker.standard_rounds(vids, "color")
    assert [[(n, v["key"]) for n, v in r] for r in rounds] == [
        [(f"a red bicycle-{i}.mp4", f"k{i}") for i in range(5)],     # VBench reads <prompt>-0 ... -4
        [("a red bicycle-0.mp4", "k5"), ("a red bicycle-1.mp4", "k6")]]
    assert worker.standard_rounds(vids, "scene") == []


@needs_vbench
def test_missing_weight_files_are_named(tmp_path):
    empty = tmp_path / "empty-root"
    empty.mkdir()
    expect = {
        "subject_consistency": ["torch/hub/checkpoints/dino_vitbase16_pretrain.pth",
                                "vbench/dino_model/facebookresearch_dino_main"],
        "background_consistency": ["vbench/clip_model/ViT-B-32.pt"],
        "motion_smoothness": ["vbench/amt_model/amt-s.pth"],
        "dynamic_degree": ["vbench/raft_model/models/raft-things.pth"],
        "aesthetic_quality": ["vbench/clip_model/ViT-L-14.pt",
                              "vbench/aesthetic_model/emb_reader/sa_0_4_vit_l_14_linear.pth"],
        "imaging_quality": ["vbench/pyiqa_model/musiq_spaq_ckpt-358bb6af.pth"],
        "human_action": ["vbench/umt_model/l16_ptk710_ftk710_ftk400_f16_res224.pth"],
        "temporal_style": ["vbench/ViCLIP/ViClip-InternVid-10M-FLT.pth"],
        "overall_consistency": ["vbench/ViCLIP/ViClip-InternVid-10M-FLT.pth"],
    }
    for dim, files in expect.items():
        reason = vb.dimension_unavailable(dim, empty)
        assert reason is not None, dim
        assert "\n" not in reason
        for f in files:
            assert f in reason, (dim, reason)
    assert vb.dimension_unavailable("temporal_flickering", empty) is None   # weight-free


def test_missing_python_packages_are_named(tmp_path, monkeypatch):
    monkeypatch.setitem(vb.DIMENSION_DEPS, "temporal_flickering", ("lowbit_no_such_module_xyz",))
    reason = vb.dimension_unavailable("temporal_flickering", tmp_path)
    assert reason is not None and "missing python packages" in reason and "lowbit_no_such_module_xyz" in reason
    # a missing package of the common set too
    monkeypatch.setitem(vb.DIMENSION_DEPS, "temporal_flickering", ())
    monkeypatch.setattr(vb, "_COMMON_DEPS", ("lowbit_no_such_vbench",))
    assert "lowbit_no_such_vbench" in vb.dimension_unavailable("temporal_flickering", tmp_path)


def test_nothing_runnable_starts_no_worker(tmp_path, videos, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("worker must not start when no dimension is runnable")
    monkeypatch.setattr(vb, "_run_worker", boom)
    res = vb.score_videos([vb.VBenchVideo("a", videos["static"], "p")], ["scene", "human_action"], tmp_path)
    assert list(res) == ["a"] and list(res["a"]) == ["scene", "human_action"]
    assert all(_is_unavailable(v) for v in res["a"].values())
    with pytest.raises(ValueError):
        vb.score_videos([vb.VBenchVideo("a", videos["static"], "p")] * 2, ["scene"], tmp_path)


def test_per_video_values_follow_vbench_scale_and_never_nan():
    assert worker.per_video_value("imaging_quality", 55.0) == pytest.approx(0.55)   # MUSIQ 0-100 -> /100
    assert worker.per_video_value("dynamic_degree", True) == 1.0
    assert worker.per_video_value("human_action", False) == 0.0
    assert worker.per_video_value("subject_consistency", 0.97) == 0.97
    nan = worker.per_video_value("aesthetic_quality", float("nan"))
    assert _is_unavailable(nan) and "non-finite" in nan["unavailable"]
    assert _is_unavailable(vb._clean(float("inf")))
    assert _is_unavailable(worker.per_video_value("subject_consistency", "weird"))


# ------------------------------------------------------------------ through the real subprocess


@needs_vbench
def test_temporal_flickering_golden_values_end_to_end(videos, tmp_path):
    empty = tmp_path / "weights"
    empty.mkdir()
    vids = [vb.VBenchVideo(k, p, f"a {k} clip") for k, p in videos.items()]
    vids.append(vb.VBenchVideo("gone", tmp_path / "missing.mp4", "a missing clip"))
    res = vb.score_videos(vids, ["temporal_flickering", "scene", "imaging_quality"], empty)

    assert list(res) == ["static", "moving", "noise", "gone"]
    for key in res:
        assert list(res[key]) == ["temporal_flickering", "scene", "imaging_quality"]
        assert _is_unavailable(res[key]["scene"]) and "vbench:scene" in res[key]["scene"]["unavailable"]
        assert "musiq_spaq_ckpt-358bb6af.pth" in res[key]["imaging_quality"]["unavailable"]
    assert _is_unavailable(res["gone"]["temporal_flickering"])

    tf = {k: res[k]["temporal_flickering"] for k in ("static", "moving", "noise")}
    assert all(isinstance(v, float) for v in tf.values()), tf
    # identical frames decode identically -> exactly 1 (notes: 1.0)
    assert tf["static"] == pytest.approx(fx.NOTES_GOLDEN["static"], abs=1e-9)
    # the square's analytic (uncompressed) value, and the notes' measured 0.9927; mp4v error ~3e-4
    assert tf["moving"] == pytest.approx(fx.moving_square_uncompressed_score(), abs=1e-3)
    assert tf["moving"] == pytest.approx(fx.NOTES_GOLDEN["moving"], abs=5e-4)
    # noise: the notes' 0.7690; over seeds 0-7 mp4v gives 0.7672..0.7697, hence 3e-3
    assert tf["noise"] == pytest.approx(fx.NOTES_GOLDEN["noise"], abs=3e-3)
    assert tf["noise"] > 0.6654 + 0.05            # far from raw uniform noise: the codec smooths it
    assert tf["static"] > tf["moving"] > tf["noise"]


@needs_vbench
def test_worker_blocks_downloads_when_weights_are_missing(videos, tmp_path):
    """Bypassing the availability check, VBench falls back to wget/urlretrieve: both must be refused
    (no stall, no file fetched) and reported per dimension, while a weight-free dimension still scores."""
    empty = tmp_path / "weights"
    empty.mkdir()
    req = tmp_path / "req.json"
    out = tmp_path / "out.json"
    req.write_text(json.dumps({"root": str(empty), "dimensions": ["imaging_quality", "temporal_flickering"],
                               "videos": [{"key": "s", "mp4": str(videos["static"]), "prompt": "a clip"}]}))
    proc = subprocess.run([sys.executable, "-m", vb.WORKER_MODULE, "--request", str(req), "--output", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == ""                       # VBench's prints go to stderr
    data = json.loads(out.read_text())
    iq = data["scores"]["s"]["imaging_quality"]
    assert _is_unavailable(iq) and "download blocked" in iq["unavailable"] and "wget" in iq["unavailable"]
    assert data["scores"]["s"]["temporal_flickering"] == pytest.approx(1.0, abs=1e-9)
    assert not any(empty.rglob("*.pth"))          # nothing was fetched into the weights root
    assert data["versions"]["vbench"] == "0.1.5" and set(data["seconds"]) == {"imaging_quality", "temporal_flickering"}


@needs_vbench
def test_worker_crash_and_timeout_become_one_line_unavailable(videos, tmp_path, monkeypatch):
    empty = tmp_path / "weights"
    empty.mkdir()
    vids = [vb.VBenchVideo("a", videos["static"], "p"), vb.VBenchVideo("b", videos["noise"], "q")]
    monkeypatch.setattr(vb, "WORKER_MODULE", "lowbit_video.metrics.no_such_worker_module")
    res = vb.score_videos(vids, ["temporal_flickering"], empty)
    for key in ("a", "b"):
        v = res[key]["temporal_flickering"]
        assert _is_unavailable(v), v
        assert "VBench worker failed" in v["unavailable"] and "no_such_worker_module" in v["unavailable"]
        assert "Traceback" not in v["unavailable"]
    monkeypatch.setattr(vb, "WORKER_MODULE", "lowbit_video.metrics.vbench_worker")
    res = vb.score_videos(vids, ["temporal_flickering"], empty, timeout=0.05)
    assert all("timed out" in res[k]["temporal_flickering"]["unavailable"] for k in ("a", "b"))


@needs_vbench
@pytest.mark.slow
def test_random_weights_of_real_architectures(tmp_path):
    """subject_consistency (stub DINO hubconf + random 768-d ViT from TORCH_HOME), aesthetic_quality
    (TorchScript tiny CLIP at vbench/clip_model/ViT-L-14.pt + random Linear(768,1)), imaging_quality
    (pyiqa MUSIQ(pretrained=False) state dict) through the real loaders. Structure, not values."""
    root = fx.write_random_weights(tmp_path / "weights")
    clips = fx.make_short_videos(tmp_path / "videos")
    vids = [vb.VBenchVideo(k, p, f"a {k} clip") for k, p in clips.items()]
    dims = ["subject_consistency", "aesthetic_quality", "imaging_quality"]

    # Without the test-only override, the random CLIP and MUSIQ files fail the manifest's hashes.
    for dim, name in (("aesthetic_quality", "ViT-L-14.pt"), ("imaging_quality", "musiq_spaq_ckpt-358bb6af.pth")):
        reason = vb.dimension_unavailable(dim, root)
        assert reason is not None and name in reason and "sha256" in reason, reason
        assert vb.dimension_unavailable(dim, root, allow_unverified_weights=True) is None

    res = vb.score_videos(vids, dims, root, allow_unverified_weights=True)
    assert set(res) == {"moving", "noise"}
    for key, row in res.items():
        assert list(row) == dims
        for dim, v in row.items():
            # random weights may give NaN (-> "non-finite score"), but never a failure of the code path
            ok = (isinstance(v, float) and math.isfinite(v)) or \
                 (_is_unavailable(v) and v["unavailable"].startswith("non-finite score"))
            assert ok, (key, dim, v)
    sc = [res[k]["subject_consistency"] for k in res]
    assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in sc)   # mean of clamped cosines

    # the same root, real CLI path (no override): hash mismatches are reported, nothing runs
    monkeypatch_free = vb.score_videos(vids[:1], ["aesthetic_quality", "imaging_quality"], root)
    for dim in ("aesthetic_quality", "imaging_quality"):
        v = monkeypatch_free["moving"][dim]
        assert _is_unavailable(v) and "does not match" in v["unavailable"]


def test_worker_network_guard_refuses_sockets_and_downloaders(tmp_path):
    code = (
        "from lowbit_video.metrics.vbench_worker import block_network, NetworkBlocked\n"
        "import socket, subprocess, urllib.request\n"
        "block_network()\n"
        "for name, fn in [('urlopen', lambda: urllib.request.urlopen('http://example.com', timeout=5)),\n"
        "                 ('socket', lambda: socket.create_connection(('127.0.0.1', 9))),\n"
        "                 ('wget', lambda: subprocess.run(['wget', 'http://example.com/x.pth'])),\n"
        "                 ('git', lambda: subprocess.Popen(['git', 'clone', 'https://github.com/x/y']))]:\n"
        "    try:\n        fn()\n        print(name, 'NOT BLOCKED')\n"
        "    except Exception as e:\n        print(name, 'blocked' if 'disabled' in str(e) or 'blocked' in str(e) else repr(e))\n"
        "print('echo', subprocess.run(['echo', 'ok'], capture_output=True, text=True).stdout.strip())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:5] == ["urlopen blocked", "socket blocked", "wget blocked", "git blocked", "echo ok"]
