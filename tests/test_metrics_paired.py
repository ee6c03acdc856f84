"""PSNR, SSIM and frame cosine against values derived by hand (not by the code under test)."""

import math

import numpy as np
import pytest

from lowbit_video.metrics.paired import cosine, psnr, psnr_cap, ssim


def const(value, t=3, h=16, w=16, dtype=np.float64):
    return np.full((t, h, w, 3), value, dtype=dtype)


def test_psnr_of_a_constant_difference_is_10_log10_of_1_over_mse():
    # every value differs by 0.1 -> MSE 0.01 -> 20 dB exactly
    assert psnr(const(0.5) + 0.1, const(0.5)) == pytest.approx(20.0, abs=1e-9)


def test_psnr_of_uint8_frames_uses_range_0_1():
    # 10 levels of 255: MSE = (10/255)^2 -> 10 log10(255^2 / 100) = 48.1308 dB
    a, b = const(100, dtype=np.uint8), const(110, dtype=np.uint8)
    assert psnr(a, b) == pytest.approx(10 * math.log10(255.0 ** 2 / 100.0), abs=1e-9)


def test_psnr_is_the_mean_over_frames_not_of_the_pooled_mse():
    a = const(0.5, t=2)
    b = a.copy()
    b[0] += 0.1  # 20 dB
    b[1] += 0.2  # 10 log10(1 / 0.04) = 13.9794 dB
    expected = (20.0 + 10 * math.log10(25.0)) / 2
    assert psnr(b, a) == pytest.approx(expected, abs=1e-9)
    assert psnr(b, a) != pytest.approx(10 * math.log10(1 / 0.025), abs=1e-3)  # the pooled-MSE value


def test_identical_frames_score_the_finite_cap():
    a = np.random.default_rng(0).integers(0, 256, (2, 8, 12, 3), dtype=np.uint8)
    cap = 10 * math.log10(8 * 12 * 3 * 255.0 ** 2)
    assert psnr_cap(8, 12) == pytest.approx(cap)
    assert psnr(a, a) == pytest.approx(cap)
    b = a.copy()
    b[0, 0, 0, 0] ^= 1  # one level in one value of one frame: exactly the cap for that frame too
    assert psnr(b, a) == pytest.approx(cap, abs=1e-6)


def test_ssim_of_a_clip_with_itself_is_one():
    a = np.random.default_rng(1).random((3, 24, 20, 3))
    assert ssim(a, a) == pytest.approx(1.0, abs=1e-12)


def test_ssim_of_two_constant_clips_is_the_luminance_term():
    # constant images: variances and covariance are 0, so SSIM = (2 mx my + C1) / (mx^2 + my^2 + C1), C1 = (0.01 * 1)^2
    c1 = 0.01 ** 2
    expected = (2 * 0.5 * 0.6 + c1) / (0.5 ** 2 + 0.6 ** 2 + c1)
    assert ssim(const(0.5), const(0.6)) == pytest.approx(expected, rel=1e-9)


def test_ssim_drops_for_noise():
    rng = np.random.default_rng(2)
    a = rng.random((2, 24, 24, 3))
    assert ssim(np.clip(a + rng.normal(0, 0.2, a.shape), 0, 1), a) < 0.9


def test_cosine_of_identical_and_scaled_frames_is_one():
    a = np.random.default_rng(3).random((2, 8, 8, 3))
    assert cosine(a, a) == pytest.approx(1.0)
    assert cosine(0.5 * a, a) == pytest.approx(1.0)


def test_cosine_of_frames_with_disjoint_support_is_zero():
    a, b = const(0.0, t=2, h=4, w=4), const(0.0, t=2, h=4, w=4)
    a[:, :, :2, 0] = 1.0  # red, left half
    b[:, :, 2:, 1] = 1.0  # green, right half
    assert cosine(a, b) == pytest.approx(0.0, abs=1e-12)


def test_cosine_is_per_flattened_frame_and_averaged():
    a, b = const(0.0, t=2, h=4, w=4), const(0.0, t=2, h=4, w=4)
    a[:, 0, 0, 0] = 1.0
    b[0, 0, 0, 0] = 1.0
    b[0, 0, 0, 1] = 1.0  # frame 0: (1,0)·(1,1) -> 1/sqrt(2)
    b[1, 0, 0, 0] = 1.0  # frame 1: identical -> 1
    assert cosine(a, b) == pytest.approx((1 / math.sqrt(2) + 1.0) / 2, abs=1e-12)


def test_cosine_black_frames():
    black, grey = const(0.0, t=1), const(0.5, t=1)
    assert cosine(black, black) == 1.0
    assert cosine(black, grey) == 0.0


@pytest.mark.parametrize("fn", [psnr, ssim, cosine])
def test_shape_mismatch_is_a_value_error(fn):
    with pytest.raises(ValueError, match="shapes differ"):
        fn(const(0.5, h=16), const(0.5, h=17))
