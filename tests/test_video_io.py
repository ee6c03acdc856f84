"""video_io: mp4 (H.264) and PNG strip writers, lossless npz, read-back helpers."""

import numpy as np
import pytest

from lowbit_video import video_io as v


def smooth_clip(T=8, H=32, W=32, seed=0):
    """A low-frequency clip (H.264 keeps it close), float32 in [0, 1]."""
    rng = np.random.default_rng(seed)
    t, y, x = np.meshgrid(np.arange(T), np.arange(H), np.arange(W), indexing="ij")
    chans = [0.5 + 0.4 * np.sin(x / W * 3 + y / H * 2 * c + t * 0.3 + rng.random()) for c in range(3)]
    return np.stack(chans, axis=-1).astype(np.float32)


def no_temps(folder):
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name] == []


def test_mp4_decodes_to_the_right_frames(tmp_path):
    clip = smooth_clip()
    info = v.write_mp4(clip, tmp_path / "video.mp4", fps=8)
    assert info["scale"] == 8 and (info["width"], info["height"], info["frames"]) == (256, 256, 8)
    big = v.read_mp4(tmp_path / "video.mp4")
    assert big.shape == (8, 256, 256, 3) and big.dtype == np.uint8
    small = v.read_mp4(tmp_path / "video.mp4", downscale=info["scale"])
    assert small.shape == (8, 32, 32, 3)
    # lossy, but close on a smooth clip
    assert np.abs(small.astype(int) - v.to_uint8(clip).astype(int)).mean() < 4
    assert no_temps(tmp_path)


@pytest.mark.parametrize("shape", [(3, 480, 832), (5, 31, 33), (1, 16, 16)])
def test_mp4_sizes_are_even(tmp_path, shape):
    T, H, W = shape
    k = v.mp4_scale(H, W)
    assert (k * H) % 2 == 0 and (k * W) % 2 == 0 and k * min(H, W) >= min(256, min(H, W))
    if min(H, W) >= 256:
        assert k == 1
    if T * H * W <= 5 * 33 * 33:
        v.write_mp4(np.zeros((T, H, W, 3), np.uint8), tmp_path / "v.mp4")
        assert v.read_mp4(tmp_path / "v.mp4").shape == (T, H * k, W * k, 3)


def test_frame_strip_round_trips_exactly(tmp_path):
    clip = np.random.default_rng(1).integers(0, 256, (8, 32, 32, 3), dtype=np.uint8)
    layout = v.write_frame_strip(clip, tmp_path / "frames.png")
    assert layout["scale"] == 4 and layout["indices"] == list(range(8))
    from PIL import Image

    with Image.open(tmp_path / "frames.png") as im:
        assert im.size == (8 * 32 * 4 + 7 * 2, 32 * 4)  # side by side, x4, 2-pixel separators
        px = np.asarray(im.convert("RGB"))
    for i in range(1, 8):  # a black and a white column between frames: visible on any background
        x = i * (32 * 4 + 2) - 2
        assert (px[:, x] == 0).all() and (px[:, x + 1] == 255).all()
    assert np.array_equal(v.read_frame_strip(tmp_path / "frames.png"), clip)
    assert v.strip_is_complete(tmp_path / "frames.png")
    assert no_temps(tmp_path)


def test_long_clip_strip_shows_evenly_spaced_frames(tmp_path):
    clip = np.zeros((40, 8, 8, 3), np.uint8)
    clip[:, 0, 0, 0] = np.arange(40)
    layout = v.write_frame_strip(clip, tmp_path / "s.png", max_frames=5)
    assert layout["indices"] == [0, 10, 20, 29, 39]
    got = v.read_frame_strip(tmp_path / "s.png")
    assert list(got[:, 0, 0, 0]) == layout["indices"]
    assert not v.strip_is_complete(tmp_path / "s.png")


def test_npz_is_lossless_and_sha_tracks_content(tmp_path):
    clip = np.random.default_rng(2).random((4, 8, 8, 3)).astype(np.float32)
    v.write_frames_npz(clip, tmp_path / "f.npz")
    back = v.read_frames_npz(tmp_path / "f.npz")
    assert back.dtype == np.uint8 and np.array_equal(back, v.to_uint8(clip))
    assert v.frames_sha256(clip) == v.frames_sha256(back)
    assert v.frames_sha256(back) != v.frames_sha256(back.reshape(8, 4, 8, 3))
    assert v.to_uint8(np.array([0.0, 0.5 / 255, 1.0, 2.0, np.nan])).tolist() == [0, 1, 255, 255, 0]


def test_bad_shapes_are_rejected(tmp_path):
    with pytest.raises(ValueError):
        v.write_mp4(np.zeros((8, 32, 32), np.uint8), tmp_path / "v.mp4")
    with pytest.raises(ValueError):
        v.write_frame_strip(np.zeros((0, 32, 32, 3), np.uint8), tmp_path / "s.png")
    assert not (tmp_path / "v.mp4").exists() and no_temps(tmp_path)
