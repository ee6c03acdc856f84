import numpy as np
import pytest

from lowbit_video.models.tiny_shapes import BACKGROUNDS, COLORS, all_prompts, batch, parse_prompt, render_clip

SPEED = 2.5


def _alpha(clip, spec):
    """Per-pixel object coverage recovered from the colours (single object)."""
    bg = np.array(BACKGROUNDS[spec.background])
    col = np.array(COLORS[spec.objects[0].color])
    return np.linalg.norm(clip - bg, axis=-1) / np.linalg.norm(col - bg)


def _centroids(alpha):
    T, H, W = alpha.shape
    ys, xs = np.indices((H, W)) + 0.5
    area = alpha.sum(axis=(1, 2))
    return (alpha * xs).sum(axis=(1, 2)) / area, (alpha * ys).sum(axis=(1, 2)) / area, area


def test_shape_dtype_range():
    clip = render_clip("a red circle moving left on a black background", seed=0)
    assert clip.shape == (8, 32, 32, 3) and clip.dtype == np.float32
    assert clip.min() >= 0.0 and clip.max() <= 1.0
    big = render_clip("a red circle moving left on a black background", seed=0, frames=4, size=64)
    assert big.shape == (4, 64, 64, 3)


def test_deterministic_in_seed_and_seeds_differ():
    p = "a blue triangle moving down on a gray background"
    assert np.array_equal(render_clip(p, seed=7), render_clip(p, seed=7))
    assert not np.array_equal(render_clip(p, seed=7), render_clip(p, seed=8))
    assert np.array_equal(render_clip(parse_prompt(p), seed=7), render_clip(p, seed=7))


@pytest.mark.parametrize("prompt", all_prompts()[::7])
def test_object_fully_inside_every_frame(prompt):
    spec = parse_prompt(prompt)
    for seed in range(3):
        clip = render_clip(spec, seed=seed)
        bg = np.array(BACKGROUNDS[spec.background], dtype=np.float32)
        # the 1-pixel border is pure background: nothing of the object reaches the edge
        for border in (clip[:, 0], clip[:, -1], clip[:, :, 0], clip[:, :, -1]):
            assert np.all(border == bg)
        alpha = _alpha(clip, spec)
        area = alpha.sum(axis=(1, 2))
        assert area.min() > 24  # visible: at least a 7-pixel triangle (7 * 7 / 2 px)
        if spec.objects[0].motion != "growing":
            np.testing.assert_allclose(area, area[0], rtol=0.03)  # never clipped


@pytest.mark.parametrize("motion, dx, dy", [("moving left", -1, 0), ("moving right", 1, 0),
                                             ("moving up", 0, -1), ("moving down", 0, 1)])
@pytest.mark.parametrize("shape", ["circle", "square", "triangle"])
def test_centroid_moves_2_5_px_per_frame_in_stated_direction(shape, motion, dx, dy):
    spec = parse_prompt(f"a green {shape} {motion} on a black background")
    for seed in range(3):
        cx, cy, _ = _centroids(_alpha(render_clip(spec, seed=seed), spec))
        # y grows downwards: "up" is decreasing row
        np.testing.assert_allclose(np.diff(cx), dx * SPEED, atol=0.1)
        np.testing.assert_allclose(np.diff(cy), dy * SPEED, atol=0.1)
        np.testing.assert_allclose(cx[-1] - cx[0], dx * SPEED * 7, atol=0.1)
        np.testing.assert_allclose(cy[-1] - cy[0], dy * SPEED * 7, atol=0.1)


@pytest.mark.parametrize("shape", ["circle", "square", "triangle"])
def test_static_stays_put_and_growing_grows_in_place(shape):
    static = parse_prompt(f"a white {shape} static on a gray background")
    clip = render_clip(static, seed=1)
    assert all(np.array_equal(clip[0], f) for f in clip)
    grow = parse_prompt(f"a yellow {shape} growing on a black background")
    for seed in range(3):
        cx, cy, area = _centroids(_alpha(render_clip(grow, seed=seed), grow))
        assert np.all(np.diff(area) > 0) and area[-1] > 3 * area[0]
        assert np.ptp(cx) < 0.1 and np.ptp(cy) < 0.1
    if shape == "square":  # side grows 1.5 px per frame: sqrt(area) = side
        np.testing.assert_allclose(np.diff(np.sqrt(area)), 1.5, atol=0.05)


def test_colours_are_the_palette():
    spec = parse_prompt("a magenta square static on a gray background")
    clip = render_clip(spec, seed=0)
    alpha = _alpha(clip, spec)
    np.testing.assert_allclose(clip[alpha > 0.999].reshape(-1, 3), np.broadcast_to(COLORS["magenta"], (int((alpha > 0.999).sum()), 3)), atol=1e-6)


def test_two_objects_both_drawn():
    spec = parse_prompt("a red circle moving left and a blue square static on a black background")
    clip = render_clip(spec, seed=0)
    red = np.all(np.isclose(clip, COLORS["red"]), axis=-1).sum(axis=(1, 2))
    blue = np.all(np.isclose(clip, COLORS["blue"]), axis=-1).sum(axis=(1, 2))
    assert red.min() > 20 and blue.min() > 40


def test_clip_that_cannot_fit_raises():
    with pytest.raises(ValueError, match="does not fit"):
        render_clip("a red square moving left on a black background", seed=0, frames=16)


def test_batch():
    clips, prompts = batch(6, seed=0)
    assert clips.shape == (6, 8, 32, 32, 3) and clips.dtype == np.float32 and len(prompts) == 6
    again, prompts2 = batch(6, seed=0)
    assert np.array_equal(clips, again) and prompts == prompts2
    assert batch(6, seed=1)[1] != prompts
    assert all(parse_prompt(p).prompt == p for p in prompts)
    pool = ["a red circle static on a black background", "a blue square growing on a white background"]
    clips, prompts = batch(5, seed=2, frames=4, size=16, prompts=pool)
    assert clips.shape == (5, 4, 16, 16, 3) and set(prompts) <= set(pool)
