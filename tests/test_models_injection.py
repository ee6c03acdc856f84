"""`use_recipe` / `install_recipe`: a recipe applied to a pipeline or transformer the user already has.

CPU tests on the shipped tiny-shapes model and on tiny random-weight Wan pipelines; one GPU test on
a Wan2.1-1.3B-sized transformer (random weights, two blocks) with the kernels."""

import contextlib
import dataclasses
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

import lowbit_video  # noqa: E402
from lowbit_video.attention import attend  # noqa: E402
from lowbit_video.errors import UserError  # noqa: E402
from lowbit_video.models.injection import install_recipe, recipe_hooks, use_recipe  # noqa: E402
from lowbit_video.models.base import cpu_noise  # noqa: E402
from lowbit_video.models.registry import get_model_info, load_model  # noqa: E402
from lowbit_video.models.tiny_checkpoints import tiny_wan_pipeline  # noqa: E402
from lowbit_video.models.tiny_shapes.sample import make_scheduler, sample  # noqa: E402
from lowbit_video.models.pipeline import DiffusersVideoModel  # noqa: E402
from lowbit_video.recipes import PrecisionPolicy, load_recipe  # noqa: E402

SHAPES_PROMPT = "a red circle moving right on a black background"
WAN_PROMPT = "a red circle moving left"
# tiny Wan: 9 frames of 32x32 -> latent (16, 3, 4, 4): VAE 4x temporal (1 + 8/4), 8x spatial
WAN_CALL = dict(height=32, width=32, num_frames=9, num_inference_steps=2, guidance_scale=5.0, output_type="np",
                max_sequence_length=16)
WAN_LATENT = (1, 16, 3, 4, 4)


def _with_policy(name, **policy):
    return dataclasses.replace(load_recipe(name), policy=PrecisionPolicy(**policy))


@pytest.fixture(scope="module")
def shapes():
    return load_model("tiny-shapes")  # the shipped weights; .model is the TinyShapesModel


@pytest.fixture
def wan_pipe():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = tiny_wan_pipeline()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _processors(transformer):
    return dict(transformer.attn_processors)


def _same_objects(before: dict, after: dict) -> bool:
    return before.keys() == after.keys() and all(after[k] is before[k] for k in before)


# ------------------------------------------------------------------------------ install / restore


def test_public_names_are_the_injection_functions():
    assert lowbit_video.use_recipe is use_recipe and lowbit_video.install_recipe is install_recipe
    assert "use_recipe" in dir(lowbit_video)


def test_use_recipe_installs_and_restores_the_same_processor_objects(shapes):
    tiny = shapes.model
    sched = make_scheduler(tiny)
    sched_class = type(sched)
    before, hooks = _processors(tiny.transformer), dict(tiny.transformer._forward_pre_hooks)
    with use_recipe(tiny, "sage2-int8", scheduler=sched) as handle:
        inside = _processors(tiny.transformer)
        assert _same_objects(before, inside)  # the model's own processors stay installed
        ours = recipe_hooks(tiny.transformer)
        assert len({id(h) for h in ours}) == len(inside) == 2 * len(tiny.transformer.blocks)
        assert type(sched) is not sched_class and isinstance(sched, sched_class) and handle.installed  # tracked
    assert _same_objects(before, _processors(tiny.transformer)) and not recipe_hooks(tiny.transformer)
    assert dict(tiny.transformer._forward_pre_hooks) == hooks
    assert type(sched) is sched_class and "step" not in vars(sched)  # the class's methods again
    assert not handle.installed


def test_processors_restored_after_an_exception_inside_the_block(shapes):
    tiny = shapes.model
    before = _processors(tiny.transformer)
    with pytest.raises(RuntimeError, match="inside"):
        with use_recipe(tiny, "mxattention", scheduler=make_scheduler(tiny)):
            raise RuntimeError("inside")
    assert _same_objects(before, _processors(tiny.transformer))


def test_install_remove_pair_on_both_experts_of_a_wan22_pipeline():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = tiny_wan_pipeline(two_experts=True)
    before = [_processors(pipe.transformer), _processors(pipe.transformer_2)]
    handle = install_recipe(pipe, "rotateattention-half")
    assert [n for n, _ in handle.transformers] == ["transformer", "transformer_2"]
    for t in (pipe.transformer, pipe.transformer_2):
        assert len(recipe_hooks(t)) == len(t.attn_processors)
    handle.remove()
    handle.remove()  # idempotent
    assert _same_objects(before[0], _processors(pipe.transformer))
    assert _same_objects(before[1], _processors(pipe.transformer_2))
    assert not recipe_hooks(pipe.transformer) and not recipe_hooks(pipe.transformer_2)
    assert "step" not in vars(pipe.scheduler)
    install_recipe(pipe, "fp16").remove()  # installable again after removal


def test_nesting_is_refused_with_one_line_and_the_outer_recipe_stays(shapes, wan_pipe):
    with use_recipe(wan_pipe, "sage2-int8"):
        inside = _processors(wan_pipe.transformer)
        with pytest.raises(UserError) as e:
            with use_recipe(wan_pipe, "mxattention"):
                pass
        msg = str(e.value)
        assert "\n" not in msg and "'sage2-int8'" in msg and "do not nest" in msg
        assert _same_objects(inside, _processors(wan_pipe.transformer))
        # the harness goes through the same function: generate inside use_recipe is refused too
        model = DiffusersVideoModel(wan_pipe, get_model_info("wan2.1-t2v-1.3b"), device=torch.device("cpu"),
                                    dtype=torch.float32)
        with pytest.raises(UserError, match="do not nest"):
            model.generate([WAN_PROMPT], [0], recipe="fp16", steps=1, height=32, width=32, frames=9)
    tiny = shapes.model
    handle = install_recipe(tiny, "fp16", scheduler=make_scheduler(tiny))
    try:
        with pytest.raises(UserError, match="already runs recipe 'fp16'"):
            install_recipe(tiny.transformer, "sage2-int8")
    finally:
        handle.remove()


def test_targets_that_hold_no_supported_transformer_are_user_errors():
    with pytest.raises(UserError, match="cannot apply a recipe to object"):
        install_recipe(object(), "sage2-int8")
    with pytest.raises(UserError, match="no recipe processors for Linear"):
        install_recipe(torch.nn.Linear(2, 2), "sage2-int8")


def test_a_step_policy_without_a_scheduler_is_refused(wan_pipe):
    recipe = _with_policy("sage2-int8", high_precision_steps=(0,))
    with pytest.raises(UserError, match="pass scheduler="):
        install_recipe(wan_pipe.transformer, recipe)  # a bare transformer has no scheduler
    install_recipe(wan_pipe.transformer, recipe, scheduler=wan_pipe.scheduler).remove()


# ---------------------------------------------------------------------------------- step policy


def test_high_precision_steps_are_counted_per_step(wan_pipe):
    # 3 steps, CFG on (guidance 5: cond and uncond forwards per step), 2 blocks (self + cross each).
    recipe = _with_policy("sage2-int8", high_precision_steps=(0,))
    with use_recipe(wan_pipe, recipe) as handle:
        wan_pipe(prompt=WAN_PROMPT, latents=cpu_noise(WAN_LATENT, 0), **dict(WAN_CALL, num_inference_steps=3))
    calls = handle.calls
    assert calls["num_steps"] == 3
    assert calls["by_step"]["0"] == {"quantized": 0, "high": 2 * 2 * 2, "fallback": 0, "engine": 0}
    for step in ("1", "2"):  # self-attention quantized, cross-attention 16-bit (policy apply_to = self)
        assert calls["by_step"][step] == {"quantized": 2 * 2, "high": 2 * 2, "fallback": 0, "engine": 0}
    assert (calls["quantized"], calls["high"], calls["fallback"]) == (8, 16, 0)
    assert calls["planned_quantized_steps"] == [1, 2]  # what a compiled run, whose calls go uncounted, records


# ------------------------------------------------------------------- generate against the model written out


@contextlib.contextmanager
def recipe_written_out(transformer, recipe, quantized_modules):
    """diffusers' Wan attention with `recipe` through the public `attend` in the calls of `quantized_modules` and
    diffusers' own call in the others: what the integration should compute, written without it (no hook, no
    policy), and the calls counted as they happen."""
    from diffusers.models.transformers import transformer_wan

    diffusers_call = transformer_wan.dispatch_attention_fn
    running, counts = [], {"quantized": 0, "high": 0}

    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, *args, **kwargs):
        if running[-1] in quantized_modules:
            assert attn_mask is None and dropout_p == 0.0 and not is_causal
            counts["quantized"] += 1
            return attend(query, key, value, recipe, layout="BNHD", scale=scale)
        counts["high"] += 1
        return diffusers_call(query, key, value, attn_mask, dropout_p, is_causal, scale, *args, **kwargs)

    def enter(module, args):
        running.append(module)

    def leave(module, args, out):
        running.pop()

    modules = [m for block in transformer.blocks for m in (block.attn1, block.attn2)]
    handles = [m.register_forward_pre_hook(enter) for m in modules] + [m.register_forward_hook(leave) for m in modules]
    transformer_wan.dispatch_attention_fn = attention
    try:
        yield counts
    finally:
        transformer_wan.dispatch_attention_fn = diffusers_call
        for h in handles:
            h.remove()


def test_wan_generate_is_the_pipeline_with_the_recipe_written_out(wan_pipe):
    model = DiffusersVideoModel(wan_pipe, get_model_info("wan2.1-t2v-1.3b"), device=torch.device("cpu"), dtype=torch.float32)
    model.max_sequence_length = 16  # the tiny text encoder
    settings = dict(steps=2, guidance=5.0, height=32, width=32, frames=9)
    call = dict(prompt=WAN_PROMPT, latents=cpu_noise(WAN_LATENT, 0), **WAN_CALL)  # the seed's noise, as documented

    def frames(result):
        return np.clip(np.asarray(result.frames, np.float32), 0, 1)

    # 16-bit: generate is the untouched pipeline, bit for bit
    untouched = frames(wan_pipe(**call))
    assert np.array_equal(model.generate([WAN_PROMPT], [0], recipe="fp16", **settings), untouched)

    # sage2-int8 (policy default: self-attention quantized, cross-attention 16-bit)
    generated = model.generate([WAN_PROMPT], [0], recipe="sage2-int8", **settings)
    assert not np.array_equal(generated, untouched)  # the recipe changes the frames: equality below is not vacuous
    t = wan_pipe.transformer
    with torch.no_grad(), recipe_written_out(t, "sage2-int8", {b.attn1 for b in t.blocks}) as counts:
        written_out = frames(wan_pipe(**call))
    assert np.array_equal(generated, written_out)
    # 2 steps x 2 forwards (CFG: cond and uncond) x 2 blocks, each with one self- and one cross-attention
    assert counts == {"quantized": 8, "high": 8}
    assert (model.last_run["quantized"], model.last_run["high"], model.last_run["fallback"]) == (8, 8, 0)


def test_shipped_model_generate_is_sample_with_the_recipe_written_out(shapes):
    # one quantized call (block 0 self-attention, one step) keeps the test cheap
    recipe = _with_policy("sage2-int8", high_precision_blocks=(1, 2, 3, 4, 5))
    tiny = shapes.model
    untouched = np.clip(sample(tiny, [SHAPES_PROMPT], [3], steps=1), 0, 1)
    assert np.array_equal(shapes.generate([SHAPES_PROMPT], [3], recipe="fp16", steps=1), untouched)

    generated = shapes.generate([SHAPES_PROMPT], [3], recipe=recipe, steps=1)
    assert not np.array_equal(generated, untouched)
    t = tiny.transformer
    with recipe_written_out(t, recipe, {t.blocks[0].attn1}) as counts:
        written_out = np.clip(sample(tiny, [SHAPES_PROMPT], [3], steps=1), 0, 1)
    assert np.array_equal(generated, written_out)
    # 6 blocks x (self + cross), one forward (guidance 1: no CFG batch)
    assert counts == {"quantized": 1, "high": 11}
    assert (shapes.last_run["quantized"], shapes.last_run["high"], shapes.last_run["fallback"]) == (1, 11, 0)


# ------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_sage2_int8_on_a_wan21_1_3b_sized_transformer_runs_the_kernels(monkeypatch):
    """Wan2.1-1.3B's transformer config (two of its 30 blocks, random init, bf16) at a 480p latent
    (81 frames of 832x480: 21x60x104, 32760 video tokens): the recipe forward against the dense one,
    the reference engine forbidden (it would mean a float64 fallback), processors restored."""
    from lowbit_video.attention import engines
    from lowbit_video.bench.e2e import WAN_1_3B, build_wan

    def no_reference(*args, **kwargs):
        raise AssertionError("a quantized call fell back to the float64 reference engine")

    model = build_wan(2, config=WAN_1_3B, device="cuda", dtype=torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = dict(hidden_states=torch.randn(1, 16, 21, 60, 104, generator=g, device="cuda", dtype=torch.bfloat16),
                  encoder_hidden_states=torch.randn(1, 512, 4096, generator=g, device="cuda", dtype=torch.bfloat16),
                  timestep=torch.tensor([500], device="cuda"), return_dict=False)
    before = _processors(model)
    with torch.inference_mode():
        dense = model(**inputs)[0].float()
        for engine in list(engines.ENGINES):  # the float64 engines: a call reaching one is a fallback
            monkeypatch.setitem(engines.ENGINES, engine, no_reference)
        with use_recipe(model, "sage2-int8") as handle:
            out = model(**inputs)[0].float()
    assert _same_objects(before, _processors(model))
    calls = handle.calls
    assert (calls["quantized"], calls["high"], calls["fallback"]) == (2, 2, 0)  # self quantized, cross 16-bit
    assert torch.isfinite(out).all() and not torch.equal(out, dense)
    cos = torch.nn.functional.cosine_similarity(out.flatten(), dense.flatten(), dim=0).item()
    assert cos > 0.99, cos
    assert calls["engine"] == 0


@pytest.mark.gpu
def test_calls_no_kernel_takes_on_cuda_are_counted_as_engine_and_said_once():
    """The tiny Wan pipeline's head_dim is 32, which no kernel takes: on CUDA its quantized calls run the
    float64 engine, each counted as "engine" (and as "quantized"), with one warning per use."""
    pipe = tiny_wan_pipeline().to("cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    t = pipe.transformer
    inputs = dict(hidden_states=torch.randn(1, 16, 3, 8, 8, generator=g, device="cuda"),
                  encoder_hidden_states=torch.randn(1, 8, t.config.text_dim, generator=g, device="cuda"),
                  timestep=torch.tensor([500], device="cuda"), return_dict=False)
    with warnings.catch_warnings(record=True) as seen, torch.inference_mode():
        warnings.simplefilter("always")
        with use_recipe(t, "mxattention") as handle:
            t(**inputs)
            t(**inputs)
    calls = handle.calls
    assert calls["quantized"] == calls["engine"] == 2 * 2  # two forwards x two blocks' self-attention
    said = [w for w in seen if "reference engine" in str(w.message)]
    assert len(said) == 1 and "head_dim 32" in str(said[0].message)
