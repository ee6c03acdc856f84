"""The weights manifest: root precedence, present/missing/bad-hash/bad-size, the hash cache, `weights check`."""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from lowbit_video.metrics import weights
from lowbit_video.metrics.registry import get_metric, list_metrics
from lowbit_video.metrics.weights import MANIFEST, WeightFile, check, missing_for, weights_root

REPO = Path(__file__).resolve().parent.parent
CLI = REPO / ".venv" / "bin" / "lowbit-video"


@pytest.fixture(autouse=True)
def _fresh_memory_cache():
    weights._HashCache._memory.clear()
    yield
    weights._HashCache._memory.clear()


def test_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(weights.ENV_VAR, raising=False)
    assert weights_root(None) == tmp_path / "home" / ".cache" / "lowbit-video" / "weights"
    monkeypatch.setenv(weights.ENV_VAR, str(tmp_path / "env"))
    assert weights_root(None) == tmp_path / "env"
    assert weights_root(str(tmp_path / "cli")) == tmp_path / "cli"


def test_manifest_covers_lpips_and_the_vbench_files():
    by_rel = {w.relpath: w for w in MANIFEST}
    alex = by_rel["torch/hub/checkpoints/alexnet-owt-7be5be79.pth"]
    assert alex.used_by == ("lpips",) and alex.sha256 == "7be5be79"
    assert by_rel["vbench/clip_model/ViT-B-32.pt"].sha256 == \
        "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af"
    assert by_rel["vbench/clip_model/ViT-L-14.pt"].sha256 == \
        "b8cca3fd41ae0c99ba7e8951adf17d267cdb84cd88be6f7c2e0eca1737a03836"
    for rel in ("torch/hub/checkpoints/dino_vitbase16_pretrain.pth", "vbench/amt_model/amt-s.pth",
                "vbench/raft_model/models/raft-things.pth", "vbench/pyiqa_model/musiq_spaq_ckpt-358bb6af.pth",
                "vbench/aesthetic_model/emb_reader/sa_0_4_vit_l_14_linear.pth",
                "vbench/umt_model/l16_ptk710_ftk710_ftk400_f16_res224.pth", "vbench/ViCLIP/ViClip-InternVid-10M-FLT.pth"):
        assert rel in by_rel, rel
    assert len({w.key for w in MANIFEST}) == len(MANIFEST)
    assert all(w.relpath.startswith(("torch/", "vbench/", "huggingface/")) for w in MANIFEST)
    assert all(w.sha256 is None or len(w.sha256) >= 8 for w in MANIFEST)


def test_every_learned_metric_has_its_files_and_the_registry_agrees():
    for m in list_metrics():
        used = tuple(w.key for w in MANIFEST if m.name in w.used_by)
        assert m.weights == used
        if m.kind == "vbench" and m.name != "temporal_flickering" or m.name == "lpips":
            assert used, m.name
    for name in ("psnr", "ssim", "cosine", "adherence", "temporal_flickering"):
        assert get_metric(name).weights == ()


def test_empty_root_everything_missing(tmp_path):
    statuses = check(tmp_path / "nothing-here")
    assert [s.key for s in statuses] == [w.key for w in MANIFEST]
    assert {s.state for s in statuses} == {"missing"}
    assert missing_for("psnr", tmp_path) is None  # needs no weights
    reason = missing_for("lpips", tmp_path)
    assert "torch/hub/checkpoints/alexnet-owt-7be5be79.pth" in reason and "\n" not in reason


def _manifest(tmp_path, data: bytes, sha: str | None, size: int | None = None):
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "w.bin").write_bytes(data)
    return (WeightFile("w", "m/w.bin", ("fake_metric",), sha, size, "test"),)


def test_hash_prefix_and_full_hash_are_verified(tmp_path):
    digest = hashlib.sha256(b"hello weights").hexdigest()
    for sha in (digest, digest[:8], digest[:8].upper()):
        (s,) = check(tmp_path, _manifest(tmp_path, b"hello weights", sha))
        assert (s.state, s.found_sha256) == ("present", digest)
    man = _manifest(tmp_path, b"hello weights", "0" * 8 if digest[:8] != "0" * 8 else "1" * 8)
    (s,) = check(tmp_path, man)
    assert s.state == "bad-hash"
    assert "m/w.bin" in missing_for("fake_metric", tmp_path, man)
    assert missing_for("fake_metric", tmp_path, _manifest(tmp_path, b"hello weights", digest)) is None


def test_size_mismatch_and_unhashed_files(tmp_path):
    (s,) = check(tmp_path, _manifest(tmp_path, b"12345", None, size=4))
    assert s.state == "bad-size"
    (s,) = check(tmp_path, _manifest(tmp_path, b"12345", None, size=5))
    assert s.state == "present" and s.found_sha256 is None  # no known hash -> not hashed


def test_dir_entries(tmp_path):
    man = (WeightFile("code", "vbench/code", ("x",), None, None, "test", kind="dir"),)
    assert check(tmp_path, man)[0].state == "missing"
    (tmp_path / "vbench" / "code").mkdir(parents=True)
    assert check(tmp_path, man)[0].state == "missing"  # empty folder
    (tmp_path / "vbench" / "code" / "hubconf.py").write_text("")
    assert check(tmp_path, man)[0].state == "present"


def test_hashes_are_cached_by_path_size_and_mtime(tmp_path, monkeypatch):
    data = b"x" * 1000
    man = _manifest(tmp_path, data, hashlib.sha256(data).hexdigest())
    assert check(tmp_path, man)[0].state == "present"
    cache = json.loads((tmp_path / weights.CACHE_NAME).read_text())
    (entry,) = cache["files"].values()
    assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["size"] == 1000

    weights._HashCache._memory.clear()
    calls = []
    real = weights._file_sha256
    monkeypatch.setattr(weights, "_file_sha256", lambda p: calls.append(p) or real(p))
    assert check(tmp_path, man)[0].state == "present"
    assert calls == []  # served from .verified.json
    path = tmp_path / "m" / "w.bin"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    assert check(tmp_path, man)[0].state == "present"
    assert len(calls) == 1  # touched -> hashed again


def test_a_replaced_file_with_the_same_name_is_rejected(tmp_path):
    data = b"good"
    man = _manifest(tmp_path, data, hashlib.sha256(data).hexdigest())
    assert check(tmp_path, man)[0].state == "present"
    path = tmp_path / "m" / "w.bin"
    st = path.stat()
    path.write_bytes(b"evil")  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    assert check(tmp_path, man)[0].state == "bad-hash"


def test_weights_check_cli_on_an_empty_folder_lists_every_file_missing_and_exits_0(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = subprocess.run([str(CLI), "weights", "check", "--weights-dir", str(empty), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["root"] == str(empty)
    assert len(data["files"]) == len(MANIFEST)
    assert {f["state"] for f in data["files"]} == {"missing"}
    assert {f["path"] for f in data["files"]} == {str(empty / w.relpath) for w in MANIFEST}
    for f in data["files"]:
        assert set(f) >= {"key", "path", "state", "detail", "used_by", "sha256", "size", "source"}
    for name in ("psnr", "ssim", "cosine", "adherence"):
        assert data["metrics"][name] == "available"
    assert "alexnet-owt-7be5be79.pth" in data["metrics"]["lpips"]["unavailable"]
    assert set(data["metrics"]) == {m.name for m in list_metrics()}
    assert not (empty / weights.CACHE_NAME).exists()  # nothing hashed, nothing written
