"""LPIPS from local weights only: a randomly initialised torchvision AlexNet saved under the real file
name stands in for the real trunk (its sha256 cannot carry the 7be5be79 prefix, so the tests inject a
manifest entry with the file's own hash, and check that the real manifest rejects it)."""

import dataclasses
import hashlib
import socket

import numpy as np
import pytest
import torch
import torchvision

from lowbit_video.metrics import lpips_metric, weights
from lowbit_video.metrics.lpips_metric import TRUNK_KEY, load_model, lpips_distance, unavailable

REL = "torch/hub/checkpoints/alexnet-owt-7be5be79.pth"


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    torch.manual_seed(0)
    sd = torchvision.models.alexnet(weights=None).state_dict()
    (root / REL).parent.mkdir(parents=True)
    torch.save(sd, root / REL)
    return root, sd, hashlib.sha256((root / REL).read_bytes()).hexdigest()


@pytest.fixture
def manifest(fake_root):
    _, _, digest = fake_root
    return tuple(dataclasses.replace(w, sha256=digest) if w.key == TRUNK_KEY else w for w in weights.MANIFEST)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    lpips_metric._CACHE.clear()
    weights._HashCache._memory.clear()


def clip(seed, t=2, h=32, w=40):
    return np.random.default_rng(seed).integers(0, 256, (t, h, w, 3), dtype=np.uint8)


def test_real_manifest_rejects_a_file_without_the_7be5be79_hash(fake_root):
    root, _, digest = fake_root
    assert not digest.startswith("7be5be79")
    reason = unavailable(root)
    assert reason is not None and "sha256" in reason and REL in reason
    with pytest.raises(RuntimeError, match="sha256"):
        load_model(root)


def test_missing_file_is_unavailable_naming_it(tmp_path):
    reason = unavailable(tmp_path)
    assert reason.startswith(f"missing {REL}")


def test_the_verified_trunk_is_loaded_into_the_slices(fake_root, manifest):
    root, sd, _ = fake_root
    assert unavailable(root, manifest) is None
    model = load_model(root, manifest)
    net = model.net
    for idx, slice_no in ((0, 1), (3, 2), (6, 3), (8, 4), (10, 5)):
        conv = getattr(net, f"slice{slice_no}")._modules[str(idx)]
        assert torch.equal(conv.weight, sd[f"features.{idx}.weight"])
        assert torch.equal(conv.bias, sd[f"features.{idx}.bias"])
    # the heads are the wheel's, not random: they are non-negative (LPIPS clamps them so in training)
    assert all((lin.model[-1].weight >= 0).all() for lin in model.lins)


def test_lpips_is_zero_on_itself_symmetric_and_positive_otherwise(fake_root, manifest):
    root, _, _ = fake_root
    model = load_model(root, manifest)
    x, y = clip(1), clip(2)
    assert lpips_distance(x, x, model) == pytest.approx(0.0, abs=1e-7)
    dxy, dyx = lpips_distance(x, y, model), lpips_distance(y, x, model)
    assert dxy > 0
    assert dxy == pytest.approx(dyx, rel=1e-5)


def test_lpips_is_the_mean_over_frames(fake_root, manifest):
    root, _, _ = fake_root
    model = load_model(root, manifest)
    x, y = clip(3, t=3), clip(4, t=3)
    per_frame = [lpips_distance(x[i:i + 1], y[i:i + 1], model) for i in range(3)]
    assert lpips_distance(x, y, model) == pytest.approx(np.mean(per_frame), rel=1e-5)


def test_input_is_scaled_to_minus_one_one(fake_root, manifest):
    import lpips

    root, _, _ = fake_root
    model = load_model(root, manifest)
    x, y = clip(5, t=1), clip(6, t=1)
    to_t = lambda a: torch.from_numpy(a / 127.5 - 1.0).float().permute(0, 3, 1, 2)  # noqa: E731
    with torch.no_grad():
        expected = float(model(to_t(x), to_t(y)).flatten()[0])
    assert lpips_distance(x, y, model) == pytest.approx(expected, rel=1e-5)
    assert isinstance(model, lpips.LPIPS)


def test_small_frames_are_refused(fake_root, manifest):
    root, _, _ = fake_root
    model = load_model(root, manifest)
    with pytest.raises(ValueError, match="at least"):
        lpips_distance(clip(1, h=16, w=16), clip(2, h=16, w=16), model)


def test_a_non_alexnet_file_with_a_matching_hash_is_refused(tmp_path):
    path = tmp_path / REL
    path.parent.mkdir(parents=True)
    torch.save({"features.0.weight": torch.zeros(3)}, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    man = tuple(dataclasses.replace(w, sha256=digest) if w.key == TRUNK_KEY else w for w in weights.MANIFEST)
    with pytest.raises(RuntimeError, match="not an AlexNet state dict"):
        load_model(tmp_path, man)
