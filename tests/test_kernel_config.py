"""Kernel tuning knobs as users pass them: `attention(config=...)`, `draft_attention(config=...)` and
`lowbit-video bench kernels --config KEY=VALUE`. A misspelt or mistyped knob must be refused, never ignored
(the measured defaults would silently run instead)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

triton = pytest.importorskip("triton", reason="triton is not installed (it is not a test dependency)")


def test_defaults_are_the_measured_ones_and_overrides_apply():
    from lowbit_video.kernels.launch import merged_config

    mx = merged_config("mx", 128, None)
    assert (mx["PIPE"], mx["NUM_STAGES"], mx["BLOCK_M"], mx["num_warps"]) == (True, 4, 128, 8)
    sage = merged_config("sage", 128, None)
    assert (sage["PIPE"], sage["BLOCK_M"], sage["num_warps"]) == (False, 64, 4)
    assert mx["GLUON"] is True and sage["GLUON"] is True  # the Gluon kernel where it applies
    over = merged_config("mx", 128, {"PIPE": False, "NUM_STAGES": 3})
    assert over["PIPE"] is False and over["NUM_STAGES"] == 3 and over["BLOCK_M"] == 128
    assert "maxnreg" not in mx and merged_config("sage", 128, {"maxnreg": 168})["maxnreg"] == 168


@pytest.mark.parametrize("config,msg", [({"num_stages": 3}, "unknown kernel config key 'num_stages'"),
                                        ({"PIPE": 1}, "PIPE must be bool"),
                                        ({"NUM_STAGES": True}, "NUM_STAGES must be int"),
                                        ({"BLOCK_M": 96}, "BLOCK_M must be a power of two"),
                                        ({"num_warps": 3}, "num_warps must be"),
                                        ({"NUM_STAGES": 0}, "NUM_STAGES must be in 1..8"),
                                        ({"WS": True}, "WS .* needs num_warps=8"),
                                        ({"maxnreg": 32}, "maxnreg must be 0 .* or in 64..255"),
                                        ({"maxnreg": 300}, "maxnreg must be 0 .* or in 64..255")])
def test_bad_kernel_config_is_refused(config, msg):
    from lowbit_video.kernels.launch import merged_config

    with pytest.raises(ValueError, match=msg):
        merged_config("sage", 128, config)


def test_bench_config_parses_typed_values_into_extra_rows():
    from lowbit_video.bench.kernels import config_variants, parse_config

    assert parse_config(["PIPE=false", "NUM_STAGES=4", "DS=table", "WS=1"]) == {
        "PIPE": False, "NUM_STAGES": 4, "DS": "table", "WS": True}
    rows = config_variants(["mxattention", "draftattention2"], ["PIPE=false"])
    assert rows == {"mxattention[PIPE=False]": {"recipe": "mxattention", "config": {"PIPE": False}}}
    assert config_variants(["mxattention"], []) == {}


@pytest.mark.parametrize("command,item,msg", [
    ("kernels", "PIPE", "KEY=VALUE"), ("kernels", "=3", "KEY=VALUE"), ("kernels", "num_stages=3", "unknown kernel config key"),
    ("kernels", "PIPE=maybe", "true or false"), ("kernels", "BLOCK_M=x", "must be an integer"),
    # bench draft takes the draft kernel's own keys (PAIR16, PIPE16, ...), not attn_fwd's
    ("draft", "PIPE=1", "unknown kernel config key 'PIPE'"), ("draft", "PAIR16=maybe", "true or false"),
    ("draft", "num_warps=x", "must be an integer")])
def test_bench_config_errors_are_one_line(command, item, msg):
    from lowbit_video.cli import app

    res = CliRunner().invoke(app, ["bench", command, "--config", item])
    assert res.exit_code == 2
    out = res.output.strip()
    assert msg in out and "Traceback" not in out and len(out.splitlines()) == 1


def test_draft_config_refuses_unknown_keys_and_types():
    import torch

    from lowbit_video.attention.draft_layout import VideoGeometry
    from lowbit_video.kernels.draft import draft_attention

    geo = VideoGeometry(1, 8, 8)
    q = k = v = torch.zeros(1, 1, 64, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="unknown draft kernel config key 'pipe4'"):
        draft_attention(q, k, v, "draftattention2", geo, config={"pipe4": True})
    with pytest.raises(ValueError, match="PIPE4 must be bool"):
        draft_attention(q, k, v, "draftattention2", geo, config={"PIPE4": 1})


def test_bench_markdown_says_which_kernel_ran():
    """GLUON is the default for sage2-int8 and MXFP4 but gives way to the Triton kernel in places: the table
    names the kernel that ran each row (from KernelStats.kernel), beside the same-run baselines."""
    from lowbit_video.bench.kernels import to_markdown

    row = dict(shape="wan-480p", recipe="sage2-int8", tflops=700.0, ratio_cudnn=1.24, ratio_flash=2.0,
               ratio_sageattention=None, prepass_ms=1.79, kernel_ms=29.54, total_ms=31.3, kernel="gluon")
    info = dict(gpu="H200", driver="x", torch="2.11", cuda="13", triton="3.6", sageattention=None,
                baselines=[dict(shape="wan-480p", backend="sdpa-cudnn", tflops=568.2, ms=38.68)],
                rows=[row, dict(row, recipe="sage2-int8[GLUON=False]", kernel="triton", ratio_cudnn=1.11)])
    lines = to_markdown(info).splitlines()
    assert "| runs on |" in lines[2]
    assert lines[4].startswith("| wan-480p | sdpa-cudnn | | 568.2 |")
    assert lines[5].startswith("| wan-480p | sage2-int8 | gluon | 700.0 | 1.24 | 2.00 | — | 1.79 | 29.54 | 31.30 |")
    assert lines[6].startswith("| wan-480p | sage2-int8[GLUON=False] | triton | 700.0 | 1.11 |")
    assert all(line.count("|") == lines[2].count("|") for line in lines[2:7])


def test_gluon_needs_a_hopper_gpu():
    """The Gluon kernel's code is sm_90's and the CPU interpreter cannot run Gluon: on CPU tensors the Triton
    kernel runs whatever the config says."""
    import torch

    from lowbit_video.kernels.launch import _gluon, merged_config

    cfg = merged_config("sage", 128, None)
    assert cfg["GLUON"] is True and _gluon(cfg, False, True, torch.device("cpu")) is False
    assert _gluon(merged_config("sage", 128, {"GLUON": False}), False, True, torch.device("cpu")) is False


def test_work_loop_defaults_per_recipe_family():
    """WORK_LOOP (the Gluon programs loop over their work tiles) is on for sage2-int8 and the PNQ MXFP4 recipes,
    off for direct P̃ placement (each measured the faster), gives way to the Triton kernel and is
    refused there."""
    from lowbit_video.kernels.launch import merged_config

    assert merged_config("sage", 128, None)["WORK_LOOP"] is True
    assert merged_config("mx", 128, None)["WORK_LOOP"] is True
    assert merged_config("mx", 128, None, "direct")["WORK_LOOP"] is False
    assert merged_config("mx", 128, {"WORK_LOOP": True}, "direct")["WORK_LOOP"] is True
    assert merged_config("sage", 128, {"GLUON": False})["WORK_LOOP"] is False
    with pytest.raises(ValueError, match="WORK_LOOP .* needs GLUON"):
        merged_config("sage", 128, {"WORK_LOOP": True, "GLUON": False})


def test_persist_is_a_gluon_knob():
    """PERSIST (one Gluon program per SM walking the work tiles) is refused with the Triton kernel rather than
    silently ignored."""
    from lowbit_video.kernels.launch import merged_config

    assert merged_config("sage", 128, {"PERSIST": True})["PERSIST"] is True
    with pytest.raises(ValueError, match="PERSIST .* needs GLUON"):
        merged_config("sage", 128, {"PERSIST": True, "GLUON": False})
    with pytest.raises(ValueError, match="PERSIST .* needs GLUON"):
        merged_config("mx", 128, {"PERSIST": True, "BLOCK_M": 64})  # a Triton knob: the Triton kernel
    with pytest.raises(ValueError, match="PERSIST .* needs GLUON"):
        merged_config("int4", 128, {"PERSIST": True, "GLUON": False})


def test_defer_is_a_gluon_knob_with_three_stages():
    """DEFER (the Gluon kernel's deferred stage release, on by default) is refused where it cannot act: with the
    Triton kernel, and with two stages (the loader could not run a tile ahead)."""
    from lowbit_video.kernels.launch import merged_config

    assert merged_config("sage", 128, None)["DEFER"] is True and merged_config("mx", 128, None)["DEFER"] is True
    # the default gives way with the Gluon kernel; asked for, it is refused
    assert merged_config("sage", 128, {"GLUON": False})["DEFER"] is False
    assert merged_config("mx", 128, {"NUM_STAGES": 2})["DEFER"] is False
    with pytest.raises(ValueError, match="DEFER .* needs GLUON and NUM_STAGES >= 3"):
        merged_config("sage", 128, {"DEFER": True, "GLUON": False})
    with pytest.raises(ValueError, match="DEFER .* needs GLUON and NUM_STAGES >= 3"):
        merged_config("mx", 128, {"DEFER": True, "NUM_STAGES": 2})
    with pytest.raises(ValueError, match="DEFER .* needs GLUON"):
        merged_config("int4", 128, {"DEFER": True, "PIPE": True})  # a Triton knob: the Triton kernel


def test_early_qk_is_a_gluon_default_and_pingpong_opt_in():
    """EARLY_QK (the Gluon kernel issues the next tile's QKᵀ before this tile's softmax) is on by default for the
    Gluon recipes (not the MXFP4 ones with direct P̃ placement) and gives way to the Triton kernel and to PINGPONG (its two consumers take turns to issue their
    MMAs; off by default); asked for where it cannot act, either is refused."""
    from lowbit_video.kernels.launch import merged_config

    assert merged_config("sage", 128, None)["EARLY_QK"] is True and merged_config("mx", 128, None)["EARLY_QK"] is True
    # measured slower for the MXFP4 recipes that place P̃ directly (mxfp4-ocp, mxattention-no-pnq-uos): off there
    assert merged_config("mx", 128, None, "direct")["EARLY_QK"] is False
    assert merged_config("mx", 128, {"EARLY_QK": True}, "direct")["EARLY_QK"] is True
    assert merged_config("sage", 128, None, "direct")["EARLY_QK"] is True
    assert merged_config("int4", 128, None)["EARLY_QK"] is True  # rotateattention-half measured faster with it
    assert merged_config("sage", 128, {"GLUON": False})["EARLY_QK"] is False
    assert merged_config("mx", 128, {"BLOCK_M": 64})["EARLY_QK"] is False  # a Triton knob: the Triton kernel
    with pytest.raises(ValueError, match="EARLY_QK .* needs GLUON"):
        merged_config("sage", 128, {"EARLY_QK": True, "GLUON": False})
    with pytest.raises(ValueError, match="EARLY_QK .* needs GLUON"):
        merged_config("int4", 128, {"EARLY_QK": True, "GLUON": False})
    assert not merged_config("mx", 128, None).get("PINGPONG")
    cfg = merged_config("sage", 128, {"PINGPONG": True})
    assert cfg["PINGPONG"] is True and cfg["EARLY_QK"] is False
    with pytest.raises(ValueError, match="PINGPONG .* needs GLUON, without EARLY_QK"):
        merged_config("sage", 128, {"PINGPONG": True, "EARLY_QK": True})
    with pytest.raises(ValueError, match="PINGPONG .* needs GLUON"):
        merged_config("mx", 128, {"PINGPONG": True, "GLUON": False})


def test_bench_draft_config_parses_draft_keys():
    from lowbit_video.bench.kernels import parse_config
    from lowbit_video.kernels.draft import DRAFT_CONFIG_KEYS

    assert parse_config(["PAIR16=1", "PIPE16=false", "num_warps=8"], DRAFT_CONFIG_KEYS) == {
        "PAIR16": True, "PIPE16": False, "num_warps": 8}


def test_draft_pair16_with_pipe16_is_refused_at_head_dim_128():
    import torch

    from lowbit_video.attention.draft_layout import VideoGeometry
    from lowbit_video.kernels.draft import draft_attention

    geo = VideoGeometry(1, 8, 8)
    q = k = v = torch.zeros(1, 1, 64, 128, dtype=torch.float16)
    with pytest.raises(ValueError, match="PAIR16 with PIPE16 fits in shared memory at head_dim 64 only"):
        draft_attention(q, k, v, "draftattention2", geo, config={"PAIR16": True, "PIPE16": True})


def test_bench_help_lists_every_kernel_config_key():
    """`bench kernels --help` spells the launcher's config keys out (so the CLI starts without triton): the two
    lists must agree."""
    from lowbit_video.cli.bench import KERNEL_CONFIG_KEYS
    from lowbit_video.kernels.launch import CONFIG_KEYS

    assert sorted(KERNEL_CONFIG_KEYS) == sorted(CONFIG_KEYS)


def test_qk_fp8_is_an_int4_knob():
    """QK_FP8 (the INT4 codes of Q and K as E4M3, QKᵀ on the FP8 MMA) defaults to "where the Gluon kernel runs"
    for the INT4 recipes (the Triton kernel measured slower with it), can be set either way, and is refused for the
    others rather than silently ignored."""
    from lowbit_video.kernels.launch import _qk_fp8, merged_config

    assert _qk_fp8(merged_config("int4", 128, None), gluon=True) is True
    assert _qk_fp8(merged_config("int4", 128, None), gluon=False) is False
    assert _qk_fp8(merged_config("int4", 128, {"QK_FP8": True}), gluon=False) is True
    assert _qk_fp8(merged_config("int4", 128, {"QK_FP8": False}), gluon=True) is False

    assert merged_config("int4", 128, None)["QK_FP8"] is None  # auto: with the Gluon kernel
    assert merged_config("int4", 128, {"QK_FP8": False})["QK_FP8"] is False
    assert not merged_config("sage", 128, None).get("QK_FP8")
    for variant in ("sage", "mx", "nvfp4"):
        with pytest.raises(ValueError, match="QK_FP8 .* INT4 recipes only"):
            merged_config(variant, 128, {"QK_FP8": True})
    with pytest.raises(ValueError, match="QK_FP8 must be bool"):
        merged_config("int4", 128, {"QK_FP8": 1})
