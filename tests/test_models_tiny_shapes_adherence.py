import numpy as np
import pytest

from lowbit_video.models.tiny_shapes import (
    BACKGROUNDS,
    COLORS,
    MOTIONS,
    SHAPES,
    ClipSpec,
    ObjectSpec,
    all_prompts,
    detect,
    parse_prompt,
    render_clip,
    score_clip,
    score_many,
)


@pytest.fixture(scope="module")
def rendered():
    specs = [parse_prompt(p) for p in all_prompts() for _ in range(2)]
    clips = [render_clip(s, seed=i % 2) for i, s in enumerate(specs)]
    return clips, specs


def test_scorer_on_clean_generated_clips(rendered):
    clips, specs = rendered
    res = score_many(clips, specs)
    assert res["n"] == 2 * len(all_prompts())
    assert res["color_accuracy"] >= 0.99
    assert res["motion_accuracy"] >= 0.99
    assert res["shape_accuracy"] >= 0.99


def test_scorer_on_noisy_clips(rendered):
    clips, specs = rendered
    rng = np.random.default_rng(0)
    noisy = [np.clip(c + rng.normal(0.0, 0.1, c.shape), 0.0, 1.0) for c in clips]
    res = score_many(noisy, specs)
    assert res["color_accuracy"] >= 0.95
    assert res["motion_accuracy"] >= 0.95
    assert res["shape_accuracy"] >= 0.90


def _other(values, current, forbidden=()):
    values = list(values)
    i = values.index(current)
    return next(v for v in values[i + 1:] + values[:i] if v != current and v not in forbidden)


def test_scorer_fails_against_the_wrong_spec(rendered):
    clips, specs = rendered
    for clip, spec in list(zip(clips, specs))[::5]:
        o = spec.objects[0]
        wrong_color = ClipSpec((ObjectSpec(_other(COLORS, o.color, (spec.background,)), o.shape, o.motion),), spec.background)
        wrong_motion = ClipSpec((ObjectSpec(o.color, o.shape, _other(MOTIONS, o.motion)),), spec.background)
        wrong_shape = ClipSpec((ObjectSpec(o.color, _other(SHAPES, o.shape), o.motion),), spec.background)
        s = score_clip(clip, wrong_color)
        assert not s["color_ok"] and s["shape_ok"] and s["motion_ok"]
        s = score_clip(clip, wrong_motion)
        assert s["color_ok"] and s["shape_ok"] and not s["motion_ok"]
        s = score_clip(clip, wrong_shape)
        assert s["color_ok"] and not s["shape_ok"] and s["motion_ok"]
    res = score_many(clips[::5], [ClipSpec((ObjectSpec(_other(COLORS, s.objects[0].color, (s.background,)), s.objects[0].shape,
                                                        _other(MOTIONS, s.objects[0].motion)),), s.background) for s in specs[::5]])
    assert res["color_accuracy"] == 0.0 and res["motion_accuracy"] == 0.0 and res["shape_accuracy"] == 1.0


def test_detect_reports_measurements():
    clip = render_clip("a red circle moving right on a gray background", seed=3)
    d = detect(clip)
    assert (d["color"], d["shape"], d["motion"], d["background"]) == ("red", "circle", "moving right", "gray")
    vx, vy = d["velocity"]
    assert vx == pytest.approx(2.5, abs=0.1) and vy == pytest.approx(0.0, abs=0.1)
    assert d["foreground_frames"] == 8
    s = score_clip(clip, "a red circle moving right on a gray background")
    assert s["color_ok"] and s["shape_ok"] and s["motion_ok"] and s["background_ok"]


def test_no_foreground_is_all_false():
    spec = parse_prompt("a red circle static on a black background")
    for clip in (np.zeros((8, 32, 32, 3)), np.full((8, 32, 32, 3), 0.5),
                 np.random.default_rng(0).uniform(0, 1, (8, 32, 32, 3))):
        s = score_clip(clip, spec)
        assert s["color"] is None and s["shape"] is None and s["motion"] is None
        assert not (s["color_ok"] or s["shape_ok"] or s["motion_ok"] or s["background_ok"])
    assert score_many([np.zeros((8, 32, 32, 3))], [spec])["color_accuracy"] == 0.0


def test_object_in_too_few_frames_is_not_found():
    clip = render_clip("a red circle static on a black background", seed=0)
    clip[3:] = 0.0  # object only in 3 of 8 frames
    assert detect(clip)["color"] is None


def test_robust_to_a_few_bad_frames():
    spec = parse_prompt("a blue square moving up on a white background")
    clip = render_clip(spec, seed=0)
    clip[2] = 1.0      # a blank frame
    clip[5] = clip[0]  # a frame stuck at the start position
    s = score_clip(clip, spec)
    assert s["color_ok"] and s["shape_ok"] and s["motion_ok"]


def test_input_conventions():
    spec = parse_prompt("a green triangle moving left on a black background")
    clip = render_clip(spec, seed=0)
    s8 = score_clip((clip * 255).round().astype(np.uint8), spec)
    assert s8["color_ok"] and s8["shape_ok"] and s8["motion_ok"]
    big = render_clip(spec, seed=0, size=64)
    sb = score_clip(big, spec)
    assert sb["color_ok"] and sb["shape_ok"] and sb["motion_ok"]
    assert sb["velocity"][0] == pytest.approx(-2.5, abs=0.1)  # reported at the 32-pixel scale
    with pytest.raises(ValueError, match="T, H, W, 3"):
        score_clip(clip[0], spec)


def test_two_object_specs_are_not_scored():
    spec = parse_prompt("a red circle moving left and a blue square static on a black background")
    clip = render_clip(spec, seed=0)
    assert score_clip(clip, spec) is None
    single = parse_prompt("a red circle static on a black background")
    res = score_many([clip, render_clip(single, seed=0)], [spec, single])
    assert res == {"color_accuracy": 1.0, "motion_accuracy": 1.0, "shape_accuracy": 1.0, "n": 1}
    assert score_many([clip], [spec]) == {"color_accuracy": None, "motion_accuracy": None, "shape_accuracy": None, "n": 0}
    with pytest.raises(ValueError):
        score_many([clip], [])


def test_backgrounds_detected():
    for bg in BACKGROUNDS:
        color = "red"
        s = score_clip(render_clip(f"a {color} square static on a {bg} background", seed=0),
                       f"a {color} square static on a {bg} background")
        assert s["background"] == bg and s["background_ok"]
