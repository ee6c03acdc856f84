"""The kernel dispatch table (kernels/dispatch.py): which variant serves which recipe, the reasons a recipe is
refused, the settings users pass (`attention(config=...)`, `draft_attention(config=...)`, `lowbit-video bench
kernels --config KEY=VALUE`), and how `attend`, the model processors and the CLI read it. A misspelt or mistyped
setting must be refused, never ignored (the measured defaults would silently run instead). CPU only, no triton
needed except where a test calls a kernel entry point (skipped without it)."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from typer.testing import CliRunner

from lowbit_video.kernels import dispatch
from lowbit_video.kernels.dispatch import merged_config
from lowbit_video.recipes import load_recipe

try:
    import triton  # noqa: F401

    HAS_TRITON = True
except Exception:  # pragma: no cover - depends on the environment
    HAS_TRITON = False
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")

# the shipped recipes and the variant that serves each, written out by hand
SHIPPED = {"fp16": "dense", "mxattention": "mx", "mxattention-no-uos": "mx", "mxattention-no-pnq-uos": "mx",
           "mxfp4-ocp": "mx", "mxfp4-tfs": "mx", "sage2-int8": "sage", "rotateattention-half": "int4",
           "rotateattention-interleaved": "int4", "rotateattention-full": "int4", "int4-baseline": "int4",
           "nvfp4": "nvfp4", "sage-nvfp4": "nvfp4", "draftattention2": "draft", "draftattention-sparse16": "draft"}


# ------------------------------------------------------------------------------------------- the rows


@pytest.mark.parametrize("recipe,variant", sorted(SHIPPED.items()))
def test_each_shipped_recipe_has_its_row_and_runs(recipe, variant):
    spec = load_recipe(recipe).attention
    row = dispatch.variant_of(spec)
    assert row.name == variant and row.refuse(spec) == ""


def test_rows_match_the_attention_spec_not_the_name():
    """A recipe is served by what its spec says: a renamed copy lands on the same row, a changed format elsewhere."""
    r = load_recipe("mxattention")
    assert dispatch.variant_of(dataclasses.replace(r, name="my-copy").attention).name == "mx"
    p_int8 = dataclasses.replace(r.attention.p, format="int8", granularity="per_row")
    row = dispatch.variant_of(dataclasses.replace(r.attention, p=p_int8))
    assert row.name == "reference" and not row.has_kernel
    assert "have no kernel" in row.refuse(dataclasses.replace(r.attention, p=p_int8))


def test_refusal_reasons_name_what_the_kernel_lacks():
    mx = load_recipe("mxattention").attention
    assert dispatch.variant_of(mx).refuse(dataclasses.replace(mx, tile_k=64)) == "kernel key tile is 128, recipe tile_k 64"
    draft = load_recipe("draftattention2").attention
    wide = dataclasses.replace(draft, draft=dataclasses.replace(draft.draft, block=128))
    ok, why = dispatch.supports(wide)
    assert not ok and why == "draft kernel: 64-token region blocks (recipe block 128)"
    assert dispatch.variant_of(wide).name == "draft"  # still a draft recipe: the draft engine runs it


def test_sage_kernel_takes_only_per_thread_key_groups_of_its_key_tile():
    """The sage2 kernels apply one key scale per lane of a quad (SageAttention2's per-thread groups of 128-key
    blocks): K per token, or per-thread groups of another block, go to the reference engine with the reason."""
    sage = load_recipe("sage2-int8").attention
    assert (sage.k.granularity, sage.k.group) == ("per_thread", 128)
    for k in (dataclasses.replace(sage.k, granularity="per_token"), dataclasses.replace(sage.k, group=64)):
        spec = dataclasses.replace(sage, k=k)
        assert dispatch.variant_of(spec).name == "sage"
        assert "K in per-thread groups of 128-key blocks" in dispatch.variant_of(spec).refuse(spec)


def test_supports_checks_device_and_head_dim():
    spec = load_recipe("sage2-int8").attention
    assert dispatch.supports(spec, "cpu", 128) == (False, "kernels run on CUDA devices only")
    assert dispatch.supports(spec, None, 96) == ((False, "head_dim 96 (kernels: 64, 128)") if HAS_TRITON
                                                 else (False, "triton is not installed"))


def test_row_traits_the_processors_and_attend_read():
    fp16, draft, mx = (dispatch.variant_of(load_recipe(n).attention) for n in ("fp16", "draftattention2", "mxattention"))
    assert fp16.plain_softmax and not fp16.geometry
    assert draft.geometry and draft.engine == "draft" and not draft.plain_softmax
    assert not mx.geometry and mx.engine == "reference" and not mx.plain_softmax


def test_kernel_recipes_list_every_recipe_a_kernel_runs_in_table_order():
    """`bench kernels` / `bench draft` default to these: every available recipe a kernel runs, none it refuses."""
    from lowbit_video.recipes import available_recipes

    names = dispatch.kernel_recipes()
    assert set(SHIPPED) <= set(names)
    assert "rotateattention-half-unconstrained" not in names  # refused: the reference engine runs it
    order = [v.name for v in dispatch.VARIANTS]
    rows = [order.index(dispatch.variant_of(load_recipe(n).attention).name) for n in names]
    assert rows == sorted(rows)
    drafts = {n for n in available_recipes() if load_recipe(n).attention.kind == "draft"}
    assert set(dispatch.kernel_recipes("draft")) == drafts and {"draftattention2", "draftattention-sparse16"} <= drafts
    assert not set(dispatch.kernel_recipes("attention")) & drafts


def test_the_non_orthogonal_rotation_control_is_refused():
    spec = load_recipe("rotateattention-half-unconstrained").attention
    row = dispatch.variant_of(spec)
    assert row.name == "int4"
    assert row.refuse(spec) == ("INT4 kernel: orthogonal rotations only (rotation_sigma = 1; the reference engine "
                                "runs the control)")


# --------------------------------------------------------------------------------- recipes read once


def test_a_named_recipe_is_read_once(monkeypatch):
    """attend(q, k, v, "name") parses no TOML and scans no recipe folder after the first call."""
    from lowbit_video import recipes
    from lowbit_video.attention import attend

    dispatch._load.cache_clear()
    reads = []
    real = recipes._read_toml
    monkeypatch.setattr(recipes, "_read_toml", lambda path: reads.append(path) or real(path))
    scans = []
    real_scan = recipes.available_recipes
    monkeypatch.setattr(recipes, "available_recipes", lambda: scans.append(1) or real_scan())
    q = torch.randn(1, 2, 16, 32, generator=torch.Generator().manual_seed(0))
    attend(q, q, q, "sage2-int8")
    first = (len(reads), len(scans))
    assert first[0] >= 1 and first[1] == 1
    for _ in range(3):
        attend(q, q, q, "sage2-int8")
    assert (len(reads), len(scans)) == first
    assert dispatch.attention_spec("sage2-int8") is dispatch.attention_spec("sage2-int8")


def test_the_cache_follows_the_recipe_folders(tmp_path, monkeypatch):
    """A name means what the recipe folders say: another LOWBIT_VIDEO_RECIPES value is another key."""
    (tmp_path / "sage2-int8.toml").write_text('name = "sage2-int8"\ndescription = "a dense stand-in"\n')
    before = dispatch.attention_spec("sage2-int8")
    monkeypatch.setenv("LOWBIT_VIDEO_RECIPES", str(tmp_path))
    assert dispatch.attention_spec("sage2-int8").kind == "dense" and before.kind == "quantized"


# ------------------------------------------------------------------------------ NaN/Inf: where checked


def test_nan_inputs_raise_on_cpu_for_every_path():
    from lowbit_video.attention import VideoGeometry, attend
    from lowbit_video.errors import NonFiniteInputError

    q = torch.randn(1, 2, 64, 64, generator=torch.Generator().manual_seed(0))
    bad = q.clone()
    bad[0, 1, 3, 5] = float("inf")
    for recipe, kw in (("fp16", {}), ("mxattention", {}), ("draftattention2", {"geometry": VideoGeometry(1, 8, 8)})):
        with pytest.raises(NonFiniteInputError, match="attention input k contains NaN or Inf"):
            attend(q, bad, q, recipe, **kw)


def test_route_of_a_call_follows_the_documented_rules(monkeypatch):
    """`dispatch.route`, which attend, the custom op and the hooks' counts ask, against attend's documented rules:
    forced backends and diagnostics, plain softmax on torch SDPA (the 16-bit kernel only for an LSE, and never while
    autograd records), CPU tensors on the CPU path with the reason, and on CUDA the kernel where one takes the call.
    (path, op): op is whether the call goes through the custom op (no LSE, no diagnostics, backend "auto")."""
    mx, fp16, draft = (load_recipe(n).attention for n in ("mxattention", "fp16", "draftattention2"))

    def how(spec, t, **kw):
        r = dispatch.route(spec, t, t, **kw)
        return r.path, r.op

    cpu = torch.zeros(1, 2, 128, 64)
    assert how(mx, cpu) == ("cpu", True) and how(mx, cpu, return_lse=True) == ("cpu", False)
    assert dispatch.route(mx, cpu, cpu).reason == "kernels run on CUDA devices only"
    assert how(mx, cpu, backend="cpu") == ("cpu", False) and how(mx, cpu, backend="reference") == ("engine", False)
    assert how(mx, cpu, backend="cpu", return_diagnostics=True) == ("engine", False)
    assert how(fp16, cpu) == ("sdpa", False) and how(fp16, cpu, return_diagnostics=True) == ("engine", False)

    monkeypatch.setattr(dispatch, "supports", lambda spec, device=None, head_dim=None: (True, ""))
    gpu = types.SimpleNamespace(is_cuda=True, device="cuda", dtype=torch.bfloat16, shape=(1, 2, 128, 64))
    assert how(mx, gpu) == ("kernel", True) and how(mx, gpu, return_lse=True) == ("kernel", False)
    assert how(fp16, gpu) == ("sdpa", False) and how(fp16, gpu, return_lse=True) == ("kernel", False)
    assert how(fp16, gpu, return_lse=True, autograd=True) == ("sdpa", False)
    assert how(draft, gpu) == ("engine", True)  # no video geometry given
    assert dispatch.route(draft, gpu, gpu).reason == ("the draft kernel needs the video geometry of every query and "
                                                       "key token")


def test_the_kernel_path_does_not_check_inputs(monkeypatch):
    """Where a kernel runs, attend adds no pass over Q, K, V and no host sync: a NaN goes to the kernel (here a
    stand-in, so that the path is taken on CPU), which `check_finite` would have refused."""
    from lowbit_video.attention import api, attend
    from lowbit_video.errors import NonFiniteInputError

    ran = []
    monkeypatch.setattr(dispatch, "kernel_refusal", lambda spec, q, k, geometry=None: "")
    monkeypatch.setattr(dispatch, "run_kernel", lambda spec, q, k, v, **kw: ran.append(spec) or torch.zeros_like(q))
    q = torch.randn(1, 2, 16, 32, generator=torch.Generator().manual_seed(0))
    q[0, 0, 0, 0] = float("nan")
    assert torch.equal(attend(q, q, q, "sage2-int8"), torch.zeros_like(q)) and len(ran) == 1
    with pytest.raises(NonFiniteInputError):
        api.check_finite(q, q, q)


# ------------------------------------------------------------------------------------------ settings


def _launch_configs():
    """(recipe, head_dim, variant, config): what each kernel asks the table for when no setting is passed, for every
    recipe a kernel runs and every head_dim the kernels take (launch.py and draft.py ask exactly so)."""
    for name in dispatch.kernel_recipes():
        spec = load_recipe(name).attention
        variant = dispatch.variant_of(spec).name
        for head_dim in dispatch.HEAD_DIMS:
            if spec.kind == "draft":
                yield name, head_dim, variant, spec, dispatch.draft_config(None, head_dim)
            else:
                yield name, head_dim, variant, spec, merged_config(variant, head_dim, None, spec.placement)


def test_default_launch_configs_keep_the_kernels_rules():
    """Properties of the measured defaults, not their values (a retune changes those): every recipe a kernel runs
    has a launch config at every head_dim the kernels take; passing a value of it back as a setting (`bench kernels
    --config KEY=VALUE`) runs the same config; the values lie in the ranges the settings state; the INT4 / NVFP4
    query tile is the recipe's Q-smoothing group (one q mean per program); none asks for what launch.py says does
    not fit in shared memory."""
    seen = set()
    for name, head_dim, variant, spec, cfg in _launch_configs():
        seen.add((name, head_dim))
        where = f"{name} at head_dim {head_dim}: {cfg}"
        if spec.kind == "draft":
            asked_of, triton_only = dispatch.draft_config, ("num_warps",)
        else:
            asked_of = lambda config, d: merged_config(variant, d, config, spec.placement)  # noqa: E731
            triton_only = dispatch.TRITON_ONLY
        for key, value in cfg.items():
            if value is None or (key in triton_only and cfg.get("GLUON")):
                continue  # None: decided at launch; a Triton-only setting asks for the Triton kernel (by design)
            assert asked_of({key: value}, head_dim) == cfg, f"{key}={value!r}, {where}"
        if spec.kind == "draft":
            continue
        assert cfg["BLOCK_M"] in (16, 32, 64, 128, 256) and cfg["num_warps"] in (1, 2, 4, 8, 16), where
        assert 1 <= cfg["NUM_STAGES"] <= 8, where
        if cfg.get("GLUON"):
            assert dispatch.BY_NAME[variant].gluon and cfg["NUM_STAGES"] >= 2, where
        if spec.smooth_q and variant in ("int4", "nvfp4"):
            assert cfg["BLOCK_M"] == spec.smooth_q_group, where
        assert not (variant == "int4" and spec.smooth_q and head_dim > 64 and cfg.get("DS") == "fused"), where
    assert {(n, d) for n in SHIPPED for d in (64, 128)} <= seen


def test_overrides_apply_and_leave_the_other_defaults():
    base = merged_config("mx", 128, None)
    stages = 3 if base["NUM_STAGES"] != 3 else 5
    over = merged_config("mx", 128, {"PIPE": not base["PIPE"], "NUM_STAGES": stages})
    assert over["PIPE"] is (not base["PIPE"]) and over["NUM_STAGES"] == stages
    assert over["BLOCK_M"] == base["BLOCK_M"] and over["num_warps"] == base["num_warps"]


@pytest.mark.parametrize("config,msg", [({"num_stages": 3}, "unknown kernel config key 'num_stages'"),
                                        ({"PIPE": 1}, "PIPE must be bool"),
                                        ({"NUM_STAGES": True}, "NUM_STAGES must be int"),
                                        ({"BLOCK_M": 96}, "BLOCK_M must be a power of two"),
                                        ({"num_warps": 3}, "num_warps must be"),
                                        ({"NUM_STAGES": 0}, "NUM_STAGES must be in 1..8")])
def test_bad_kernel_config_is_refused(config, msg):
    with pytest.raises(ValueError, match=msg):
        merged_config("sage", 128, config)


@pytest.mark.parametrize("key", ["WS", "TMA", "maxnreg", "PINGPONG", "PERSIST", "PROGRAMS"])
def test_removed_settings_are_unknown(key):
    """Settings of experiments that measured slower or no faster were deleted (kernels/README.md says what each
    was); passing one is a one-line error, not a silent no-op."""
    with pytest.raises(ValueError, match=f"unknown kernel config key '{key}'"):
        merged_config("sage", 128, {key: True})


@pytest.mark.parametrize("key", ["PIPE4", "PIPE8", "PIPE16", "PAIR16"])
def test_removed_draft_settings_are_unknown(key):
    with pytest.raises(ValueError, match=f"unknown draft kernel config key '{key}'"):
        dispatch.draft_config({key: True}, 128)


def test_bench_config_parses_typed_values_into_extra_rows():
    from lowbit_video.bench.kernels import config_variants, parse_config

    assert parse_config(["PIPE=false", "NUM_STAGES=4", "DS=table", "GLUON=1"]) == {
        "PIPE": False, "NUM_STAGES": 4, "DS": "table", "GLUON": True}
    rows = config_variants(["mxattention", "draftattention2"], ["PIPE=false"])
    assert rows == {"mxattention[PIPE=False]": {"recipe": "mxattention", "config": {"PIPE": False}}}
    assert config_variants(["mxattention"], []) == {}


@pytest.mark.parametrize("command,item,msg", [
    ("kernels", "PIPE", "KEY=VALUE"), ("kernels", "=3", "KEY=VALUE"), ("kernels", "num_stages=3", "unknown kernel config key"),
    ("kernels", "PIPE=maybe", "true or false"), ("kernels", "BLOCK_M=x", "must be an integer"),
    ("kernels", "WS=true", "unknown kernel config key 'WS'"),
    # bench draft takes the draft kernel's own keys (PROMOTE, prepass_warps, ...), not attn_fwd's
    ("draft", "PIPE=1", "unknown kernel config key 'PIPE'"), ("draft", "PROMOTE=maybe", "true or false"),
    ("draft", "num_warps=x", "must be an integer")])
def test_bench_config_errors_are_one_line(command, item, msg):
    from lowbit_video.cli import app

    res = CliRunner().invoke(app, ["bench", command, "--config", item])
    assert res.exit_code == 2
    out = res.output.strip()
    assert msg in out and "Traceback" not in out and len(out.splitlines()) == 1


@needs_triton
def test_draft_config_refuses_unknown_keys_and_types():
    from lowbit_video.attention import VideoGeometry
    from lowbit_video.kernels.draft import draft_attention

    geo = VideoGeometry(1, 8, 8)
    q = k = v = torch.zeros(1, 1, 64, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="unknown draft kernel config key 'promote'"):
        draft_attention(q, k, v, "draftattention2", geo, config={"promote": True})
    with pytest.raises(ValueError, match="PROMOTE must be bool"):
        draft_attention(q, k, v, "draftattention2", geo, config={"PROMOTE": 1})


def test_bench_markdown_says_which_kernel_ran():
    """GLUON is the default for sage2-int8 and MXFP4 but gives way to the Triton kernel in places: the table
    names the kernel that ran each row (from KernelStats.kernel), beside the same-run baselines."""
    from lowbit_video.bench.kernels import to_markdown

    row = dict(shape="wan-480p", recipe="sage2-int8", tflops=700.0, ratio_cudnn=1.24, ratio_flash=2.0,
               ratio_sageattention=None, prepass_ms=1.79, kernel_ms=29.54, total_ms=31.3, kernel="gluon",
               queued_ms=30.4, ratio_cudnn_queued=1.27, sustained_ms=31.0, ratio_cudnn_sustained=40.0 / 31.0)
    info = dict(gpu="H200", driver="x", torch="2.11", cuda="13", triton="3.6", sageattention=None,
                baselines=[dict(shape="wan-480p", backend="sdpa-cudnn", tflops=568.2, ms=38.68, queued_ms=38.5,
                                sustained_ms=40.0)],
                rows=[row, dict(row, recipe="sage2-int8[GLUON=False]", kernel="triton", ratio_cudnn=1.11,
                                sustained_ms=None, ratio_cudnn_sustained=None)])
    lines = to_markdown(info).splitlines()
    assert "| runs on |" in lines[2]
    assert lines[2].endswith("| queued ms | × cuDNN queued | sustained ms | × cuDNN sustained |")
    assert lines[4].startswith("| wan-480p | sdpa-cudnn | | 568.2 |") and lines[4].endswith("| 38.68 | 38.50 | | 40.00 | |")
    assert lines[5] == ("| wan-480p | sage2-int8 | gluon | 700.0 | 1.24 | 2.00 | — | 1.79 | 29.54 | 31.30 | 30.40 | 1.27 "
                        "| 31.00 | 1.29 |")
    assert lines[6].startswith("| wan-480p | sage2-int8[GLUON=False] | triton | 700.0 | 1.11 |")
    assert lines[6].endswith("| 30.40 | 1.27 | — | — |")  # a run without the sustained timing: dashes
    assert all(line.count("|") == lines[2].count("|") for line in lines[2:7])


def test_gluon_needs_a_hopper_gpu():
    """The Gluon kernel's code is sm_90's and the CPU interpreter cannot run Gluon: on CPU tensors the Triton
    kernel runs whatever the config says."""
    cfg = merged_config("sage", 128, {"GLUON": True})
    assert cfg["GLUON"] is True and dispatch.gluon_runs(cfg, False, True, torch.device("cpu")) is False
    assert dispatch.gluon_runs(merged_config("sage", 128, {"GLUON": False}), False, True, torch.device("cpu")) is False


def test_gluon_config_is_refused_where_it_does_not_apply():
    """GLUON exists for sage2-int8, the MXFP4 and the INT4 recipes; a setting only the Triton kernel has selects the
    Triton kernel, and asking for both is refused rather than one of them silently ignored."""
    with pytest.raises(ValueError, match="GLUON .* sage2-int8, the MXFP4 and the INT4 recipes only"):
        merged_config("nvfp4", 128, {"GLUON": True})
    for variant in ("sage", "mx", "int4"):
        for head_dim in (64, 128):
            assert merged_config(variant, head_dim, {"GLUON": True})["GLUON"] is True
    assert merged_config("int4", 64, {"DS": "fused"})["GLUON"] is False  # a Triton-kernel path: a default gives way
    with pytest.raises(ValueError, match="GLUON with the INT4 recipes reads the ΔS table"):
        merged_config("int4", 64, {"GLUON": True, "DS": "fused"})
    assert not merged_config("dense", 128, None).get("GLUON")
    with pytest.raises(ValueError, match="GLUON needs NUM_STAGES >= 2"):
        merged_config("sage", 128, {"GLUON": True, "NUM_STAGES": 1})
    assert merged_config("sage", 128, {"NUM_STAGES": 1})["GLUON"] is False
    assert merged_config("mx", 128, {"PIPE": False})["GLUON"] is False
    assert merged_config("mx", 128, {"GLUON": True, "NUM_STAGES": 2})["GLUON"] is True
    with pytest.raises(ValueError, match="BLOCK_M tune.* the Triton kernel"):
        merged_config("sage", 128, {"GLUON": True, "BLOCK_M": 128})


def test_work_loop_is_a_gluon_setting():
    """WORK_LOOP (the Gluon programs loop over their work tiles; its default per recipe family is measured) can be
    asked for with either P̃ placement, gives way to the Triton kernel and is refused there."""
    for placement in ("pnq", "direct"):
        assert merged_config("mx", 128, {"GLUON": True, "WORK_LOOP": True}, placement)["WORK_LOOP"] is True
        assert merged_config("mx", 128, {"GLUON": True, "WORK_LOOP": False}, placement)["WORK_LOOP"] is False
    assert merged_config("sage", 128, {"GLUON": False})["WORK_LOOP"] is False
    with pytest.raises(ValueError, match="WORK_LOOP .* needs GLUON"):
        merged_config("sage", 128, {"WORK_LOOP": True, "GLUON": False})


def test_three_consumers_only_where_their_registers_fit():
    """CONSUMERS=3 (three consumer warpgroups per Gluon program, sage2-int8's) is refused where it cannot run or
    measured slower: at head_dim 128 (three warpgroups' registers spill), for the MXFP4 and INT4 recipes and with
    the Triton kernel; 2 and 3 are the only counts. The default gives way where it cannot run."""
    assert merged_config("sage", 64, {"CONSUMERS": 3})["CONSUMERS"] == 3
    assert merged_config("sage", 64, {"CONSUMERS": 2})["CONSUMERS"] == 2
    assert merged_config("sage", 64, {"GLUON": False}).get("CONSUMERS", 2) == 2
    for variant, head_dim, extra in (("sage", 128, {}), ("mx", 64, {}), ("int4", 64, {}),
                                     ("sage", 64, {"GLUON": False})):
        with pytest.raises(ValueError, match="CONSUMERS=3 needs GLUON, head_dim 64 and sage2-int8"):
            merged_config(variant, head_dim, dict(extra, CONSUMERS=3))
    for count in (1, 4):
        with pytest.raises(ValueError, match="CONSUMERS must be 2 or 3"):
            merged_config("sage", 64, {"CONSUMERS": count})


def test_defer_is_a_gluon_setting_with_three_stages():
    """DEFER (the Gluon kernel's deferred stage release) is refused where it cannot act: with the Triton kernel, and
    with two stages (the loader could not run a tile ahead)."""
    assert merged_config("sage", 128, {"GLUON": True, "NUM_STAGES": 3, "DEFER": True})["DEFER"] is True
    # a default gives way without the Gluon kernel or its third stage; asked for, it is refused
    assert merged_config("sage", 128, {"GLUON": False})["DEFER"] is False
    assert merged_config("mx", 128, {"NUM_STAGES": 2})["DEFER"] is False
    with pytest.raises(ValueError, match="DEFER .* needs GLUON and NUM_STAGES >= 3"):
        merged_config("sage", 128, {"DEFER": True, "GLUON": False})
    with pytest.raises(ValueError, match="DEFER .* needs GLUON and NUM_STAGES >= 3"):
        merged_config("mx", 128, {"DEFER": True, "NUM_STAGES": 2})
    with pytest.raises(ValueError, match="DEFER .* needs GLUON"):
        merged_config("int4", 128, {"DEFER": True, "PIPE": True})  # a Triton setting: the Triton kernel


def test_early_qk_is_a_gluon_setting():
    """EARLY_QK (the Gluon kernel issues the next tile's QKᵀ before this tile's softmax; its default per recipe
    family is measured) can be asked for with either P̃ placement and gives way to the Triton kernel; asked for where
    it cannot act, it is refused."""
    for variant in ("sage", "mx", "int4"):
        for placement in ("pnq", "direct"):
            assert merged_config(variant, 128, {"GLUON": True, "EARLY_QK": True}, placement)["EARLY_QK"] is True
    assert merged_config("sage", 128, {"GLUON": False})["EARLY_QK"] is False
    assert merged_config("mx", 128, {"BLOCK_M": 64})["EARLY_QK"] is False  # a Triton setting: the Triton kernel
    with pytest.raises(ValueError, match="EARLY_QK .* needs GLUON"):
        merged_config("sage", 128, {"EARLY_QK": True, "GLUON": False})
    with pytest.raises(ValueError, match="EARLY_QK .* needs GLUON"):
        merged_config("int4", 128, {"EARLY_QK": True, "GLUON": False})


def test_bench_draft_config_parses_draft_keys():
    from lowbit_video.bench.kernels import parse_config

    assert parse_config(["PROMOTE=1", "prepass_warps=8", "num_warps=8"], dispatch.DRAFT_KEYS) == {
        "PROMOTE": True, "prepass_warps": 8, "num_warps": 8}


def test_bench_help_documents_every_setting():
    """`bench kernels --help` and `bench draft --help` name and explain every setting of the table."""
    from lowbit_video.cli import app

    for command, settings in (("kernels", dispatch.ATTENTION_SETTINGS), ("draft", dispatch.DRAFT_SETTINGS)):
        res = CliRunner().invoke(app, ["bench", command, "--help"], env={"COLUMNS": "400"})
        assert res.exit_code == 0
        text = " ".join(res.output.replace("│", " ").split())
        for s in settings:
            assert f"{s.name} ({s.type.__name__}): {' '.join(s.help.split())[:40]}" in text, s.name


def test_qk_fp8_is_an_int4_setting():
    """QK_FP8 (the INT4 codes of Q and K as E4M3, QKᵀ on the FP8 MMA) can be set either way for the INT4 recipes
    and is refused for the others rather than silently ignored."""
    for value in (True, False):
        assert merged_config("int4", 128, {"QK_FP8": value})["QK_FP8"] is value
    assert not merged_config("sage", 128, None).get("QK_FP8")
    for variant in ("sage", "mx", "nvfp4"):
        with pytest.raises(ValueError, match="QK_FP8 .* INT4 recipes only"):
            merged_config(variant, 128, {"QK_FP8": True})
    with pytest.raises(ValueError, match="QK_FP8 must be bool"):
        merged_config("int4", 128, {"QK_FP8": 1})


@needs_triton
def test_qk_fp8_follows_the_kernel_that_runs():
    from lowbit_video.kernels.launch import _qk_fp8

    auto = dict(merged_config("int4", 128, None), QK_FP8=None)  # None: E4M3 codes where the Gluon kernel runs
    assert _qk_fp8(auto, gluon=True) is True
    assert _qk_fp8(auto, gluon=False) is False
    assert _qk_fp8(merged_config("int4", 128, {"QK_FP8": True}), gluon=False) is True
    assert _qk_fp8(merged_config("int4", 128, {"QK_FP8": False}), gluon=True) is False


@needs_triton
def test_the_table_knows_the_kernels_rules():
    """The MX scale rules the table accepts are the kernel's (kernels/_core.RULE_IDS)."""
    from lowbit_video.kernels._core import RULE_IDS
    from lowbit_video.recipes import MX_RULES

    assert set(RULE_IDS) == set(MX_RULES)
