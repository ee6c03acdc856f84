"""Recipe attention hooks inside diffusers' Wan and HunyuanVideo transformers (tiny random weights)."""

import dataclasses
import functools
import warnings

import pytest
import torch

pytest.importorskip("diffusers")

from diffusers import HunyuanVideoTransformer3DModel, WanTransformer3DModel  # noqa: E402
from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoAttnProcessor2_0  # noqa: E402
from diffusers.models.transformers.transformer_wan import WanAttnProcessor  # noqa: E402

from lowbit_video.errors import UserError  # noqa: E402
from lowbit_video.models import attention_hook  # noqa: E402
from lowbit_video.models.injection import attention_modules, recipe_hooks, use_recipe  # noqa: E402
from lowbit_video.models.masks import UnsupportedMask, key_padding  # noqa: E402
from lowbit_video.models.steps import StepTracker  # noqa: E402
from lowbit_video.models.tiny_checkpoints import (tiny_hunyuan_transformer_config,  # noqa: E402
                                                  tiny_wan_transformer_config)
from lowbit_video.recipes import PrecisionPolicy, load_recipe  # noqa: E402


def _with_policy(name, **policy):
    return dataclasses.replace(load_recipe(name), policy=PrecisionPolicy(**policy))


@pytest.fixture(scope="module")
def wan():
    torch.manual_seed(0)
    t = WanTransformer3DModel(**tiny_wan_transformer_config()).eval()
    g = torch.Generator().manual_seed(1)
    inputs = dict(hidden_states=torch.randn(2, 16, 2, 8, 8, generator=g), timestep=torch.tensor([500.0, 700.0]),
                  encoder_hidden_states=torch.randn(2, 7, 32, generator=g), return_dict=False)
    return t, inputs


@pytest.fixture(scope="module")
def hunyuan():
    torch.manual_seed(0)
    t = HunyuanVideoTransformer3DModel(**tiny_hunyuan_transformer_config()).eval()
    g = torch.Generator().manual_seed(1)
    inputs = dict(hidden_states=torch.randn(2, 4, 2, 8, 8, generator=g), timestep=torch.tensor([500.0, 500.0]),
                  encoder_hidden_states=torch.randn(2, 6, 16, generator=g),
                  # row 0: 3 valid text tokens, 3 padded; row 1: all valid
                  encoder_attention_mask=torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]]),
                  pooled_projections=torch.randn(2, 8, generator=g), guidance=torch.tensor([6000.0, 6000.0]),
                  return_dict=False)
    return t, inputs


def _run(t, inputs, recipe=None):
    with torch.no_grad():
        if recipe is None:
            return t(**inputs)[0], None
        with use_recipe(t, recipe, tracker=StepTracker()) as handle:  # one forward: step 0 of 1
            out = t(**inputs)[0]
        return out, handle


# ------------------------------------------------------------------------------------ installation


def _module_state(t):
    """Per attention module: its processor object and the attributes it holds itself."""
    return {n: (m.processor, sorted(vars(m))) for n, m in t.named_modules() if hasattr(m, "processor")}


def test_wan_hooks_on_every_attention_module_with_block_and_type(wan):
    t, _ = wan
    before = _module_state(t)
    with use_recipe(t, "mxattention") as handle:
        hooks = handle.hooks
        assert len(hooks) == 2 * len(t.blocks)
        for i, block in enumerate(t.blocks):
            h1, h2 = hooks[f"transformer/blocks.{i}.attn1"], hooks[f"transformer/blocks.{i}.attn2"]
            assert (h1.block_index, h1.attention_type) == (i, "self")
            assert (h2.block_index, h2.attention_type) == (i, "cross")
            assert h1.num_blocks == len(t.blocks) and h1.rope_segments == (12, 10, 10)
            assert recipe_hooks(block.attn1) == [h1]
        assert len({id(h) for h in hooks.values()}) == len(hooks)  # one hook per module
        # the model's own processors stay installed, untouched
        assert all(type(p) is WanAttnProcessor for p in t.attn_processors.values())
        assert {n: p for n, (p, _) in _module_state(t).items()} == {n: p for n, (p, _) in before.items()}
    # restored afterwards: no hook, no registry or forward attribute left on a module
    assert _module_state(t) == before and not recipe_hooks(t)
    assert all(type(p) is WanAttnProcessor for p in t.attn_processors.values())


def test_an_exception_inside_attention_leaves_no_hook_taking_calls(wan, monkeypatch):
    # The forward fails inside the first quantized call: afterwards a dispatch_attention_fn call from outside any
    # module's forward (a VAE, a text encoder) must run diffusers' own function, not a hook of the failed forward.
    from lowbit_video.models import attention_hook

    t, inputs = wan

    def broken(*a, **kw):
        raise RuntimeError("kernel failed")

    monkeypatch.setattr(attention_hook, "attend", broken)
    with torch.no_grad(), use_recipe(t, _with_policy("mxattention")) as handle:
        with pytest.raises(RuntimeError, match="kernel failed"):
            t(**inputs)
        interposers = {id(h.interposer): h.interposer for h in handle.hooks.values() if h.interposer is not None}
        assert interposers and all(ip.active is None for ip in interposers.values())


def test_hunyuan_hooks_on_dual_and_single_blocks_not_the_refiner(hunyuan):
    t, _ = hunyuan
    with use_recipe(t, "mxattention") as handle:
        ours = {k.split("/", 1)[1]: h for k, h in handle.hooks.items()}
        assert set(ours) == {"transformer_blocks.0.attn", "single_transformer_blocks.0.attn"}
        assert [(h.block_index, h.attention_type) for h in ours.values()] == [(0, "joint"), (1, "joint")]
        assert all(h.num_blocks == 2 and h.rope_segments == (8, 12, 12) for h in ours.values())
        refiner = [n for n, m in t.named_modules() if n.startswith("context_embedder") and hasattr(m, "processor")]
        assert refiner and not any(hasattr(t.get_submodule(n), "_diffusers_hook") for n in refiner)
        assert all(type(p) is HunyuanVideoAttnProcessor2_0 for k, p in t.attn_processors.items()
                   if not k.startswith("context_embedder"))
    assert not recipe_hooks(t)


def test_attention_modules_lists_blocks_in_order(wan, hunyuan):
    names = [(n, b, k) for n, _, b, k in attention_modules(wan[0])]
    assert names == [("blocks.0.attn1", 0, "self"), ("blocks.0.attn2", 0, "cross"),
                     ("blocks.1.attn1", 1, "self"), ("blocks.1.attn2", 1, "cross")]
    names = [(n, b) for n, _, b, _ in attention_modules(hunyuan[0])]
    assert names == [("transformer_blocks.0.attn", 0), ("single_transformer_blocks.0.attn", 1)]


def test_unsupported_transformer_is_a_user_error():
    with pytest.raises(UserError, match="no recipe processors for Linear"):
        with use_recipe(torch.nn.Linear(2, 2), "fp16"):
            pass


def test_hooks_removed_after_an_exception(wan):
    t, _ = wan
    before = _module_state(t)
    with pytest.raises(RuntimeError, match="boom"):
        with use_recipe(t, "mxattention"):
            raise RuntimeError("boom")
    assert _module_state(t) == before and not recipe_hooks(t)
    assert all(type(p) is WanAttnProcessor for p in t.attn_processors.values())


def test_dispatch_name_is_diffusers_function_again_after_removal(wan):
    import diffusers.models.transformers.transformer_wan as tw
    from diffusers.models.attention_dispatch import dispatch_attention_fn

    t, _ = wan
    other = WanTransformer3DModel(**tiny_wan_transformer_config()).eval()
    first = use_recipe(t, "mxattention")
    first.__enter__()
    with use_recipe(other, "fp16"):
        assert tw.dispatch_attention_fn is not dispatch_attention_fn  # one stand-in, shared by both
        first.__exit__(None, None, None)  # removed out of order: the other installation keeps it
        assert tw.dispatch_attention_fn is not dispatch_attention_fn
    assert tw.dispatch_attention_fn is dispatch_attention_fn


# ------------------------------------------------------------------------- high precision is exact


@pytest.mark.parametrize("family", ["wan", "hunyuan"])
def test_high_precision_calls_are_bit_identical_to_the_unmodified_model(family, wan, hunyuan):
    t, inputs = wan if family == "wan" else hunyuan
    ref, _ = _run(t, inputs)
    nb = 2
    for recipe in (load_recipe("fp16"),
                   _with_policy("mxattention", high_precision_blocks=tuple(range(nb))),
                   _with_policy("mxattention", high_precision_steps=(0,)),
                   _with_policy("nvfp4", apply_to=()),
                   _with_policy("draftattention2", high_precision_blocks=(-1, -2))):
        out, handle = _run(t, inputs, recipe)
        assert torch.equal(out, ref), recipe.name
        assert handle.calls["quantized"] == 0 and handle.calls["high"] > 0


@pytest.mark.parametrize("family", ["wan", "hunyuan"])
@pytest.mark.parametrize("name", ["mxattention", "nvfp4", "draftattention2"])
def test_quantized_recipe_changes_the_output_as_the_engine_does(family, name, wan, hunyuan, monkeypatch):
    """The recipe's output against the same model whose quantized calls run the float64 engine (attend's
    backend="reference"): the CPU path is the engine's numbers within 1e-3 relative per call (test_attention_cpu_path),
    so the outputs agree within that and within a hundredth of what the recipe moves them from the unquantized
    model (measured: below 2e-7 relative, the recipes moving them by 3e-3 to 5e-2)."""
    t, inputs = wan if family == "wan" else hunyuan
    if family == "wan" and name == "draftattention2":  # one 64-token block per frame: an 8x8 token grid (patch 2x2)
        inputs = dict(inputs, hidden_states=torch.randn(2, 16, 2, 16, 16, generator=torch.Generator().manual_seed(2)))
    recipe = _with_policy(name)
    ref, _ = _run(t, inputs)
    out, handle = _run(t, inputs, recipe)
    monkeypatch.setattr(attention_hook, "attend", functools.partial(attention_hook.attend, backend="reference"))
    engine, _ = _run(t, inputs, recipe)
    assert torch.isfinite(out).all() and not torch.equal(engine, ref)
    moved, off = float((engine - ref).norm() / ref.norm()), float((out - engine).norm() / engine.norm())
    assert off <= 1e-3 and off <= 1e-2 * moved, (moved, off)
    s = handle.calls
    # Wan: self-attention only (policy default), cross stays 16-bit; Hunyuan: every joint attention.
    assert s["quantized"] == 2 and s["high"] == (2 if family == "wan" else 0)


def test_policy_picks_blocks(wan):
    t, inputs = wan
    ref, _ = _run(t, inputs)
    out, handle = _run(t, inputs, _with_policy("mxattention", high_precision_blocks=(0,)))
    quant = {k[1] for k, n in handle.context.stats.items() if k[4] == "quantized"}
    assert quant == {1}
    out_cross, handle = _run(t, inputs, _with_policy("mxattention", apply_to=("self", "cross")))
    assert handle.calls["quantized"] == 4 and not torch.equal(out_cross, ref)


# ------------------------------------------------------------------------------------- masks


def test_key_padding_forms():
    b = torch.tensor([[True, True, False]])
    assert torch.equal(key_padding(b.view(1, 1, 1, 3), 1, 3), b)
    assert torch.equal(key_padding(torch.tensor([[0.0, 0.0, float("-inf")]]), 1, 3), b)
    assert torch.equal(key_padding(torch.tensor([[1, 1, 0]]), 2, 3), b.expand(2, 3))
    assert key_padding(None, 1, 3) is None
    with pytest.raises(UnsupportedMask):
        key_padding(torch.tril(torch.ones(3, 3, dtype=torch.bool)).view(1, 1, 3, 3), 1, 3)  # causal
    with pytest.raises(UnsupportedMask):
        key_padding(torch.tensor([[0.0, -0.5, 0.0]]), 1, 3)  # soft bias


def test_hunyuan_padding_mask_is_exact_under_quantization(hunyuan):
    # Row 0 has 3 valid text tokens of 6: with the mask it must equal running the same row with
    # only its 3 valid text tokens (no padding at all), up to float rounding elsewhere in the model.
    t, inputs = hunyuan
    recipe = _with_policy("mxattention")
    full, _ = _run(t, inputs, recipe)
    cut = dict(inputs, hidden_states=inputs["hidden_states"][:1], timestep=inputs["timestep"][:1],
               encoder_hidden_states=inputs["encoder_hidden_states"][:1, :3],
               encoder_attention_mask=inputs["encoder_attention_mask"][:1, :3],
               pooled_projections=inputs["pooled_projections"][:1], guidance=inputs["guidance"][:1])
    short, _ = _run(t, cut, recipe)
    ref_full, _ = _run(t, inputs)
    ref_short, _ = _run(t, cut)
    tol = (ref_full[:1] - ref_short).abs().max().item() * 4 + 1e-6  # what 16-bit math itself differs by
    assert (full[:1] - short).abs().max().item() <= tol
    # and the padded row differs from running it with padding included as keys
    assert not torch.equal(full, _run(t, dict(inputs, encoder_attention_mask=torch.ones(2, 6, dtype=torch.long)),
                                      recipe)[0])


def test_the_padding_mask_is_read_on_the_host_once_per_forward(hunyuan, monkeypatch):
    # The model passes one mask object to all its joint blocks (dual- and single-stream): the valid keys are
    # found once per forward, and every quantized call then gathers by device indices (no host sync per call).
    from lowbit_video.models import masks

    reads = []
    real = masks.key_padding
    monkeypatch.setattr(masks, "key_padding", lambda *a: reads.append(a) or real(*a))
    t, inputs = hunyuan
    n_joint = len(t.transformer_blocks) + len(t.single_transformer_blocks)
    with torch.no_grad(), use_recipe(t, _with_policy("mxattention"), tracker=StepTracker()) as handle:
        t(**inputs)
        t(**inputs)
    assert handle.calls["quantized"] == 2 * n_joint > 2
    assert len(reads) == 2  # one per forward


def test_a_query_and_key_padding_mask_is_read_in_slabs_and_under_inference_mode():
    # HunyuanVideo-1.5 pads queries and keys alike: m[q, k] = valid[q] & valid[k]. Checked a slab of query rows at
    # a time (the whole N x N comparison does not fit at video lengths), also on masks made under inference_mode.
    from lowbit_video.models import masks

    valid = torch.tensor([[True] * 5 + [False] * 3])
    m = (valid[:, :, None] & valid[:, None, :])[:, None]  # (1, 1, 8, 8)
    with torch.inference_mode():
        im = m.clone()
        plan = masks.padding_plan({}, im, 1, 8, None)
    assert torch.equal(masks.key_padding(m, 1, 8), valid)
    assert masks._pads_queries_and_keys(m[:, 0], valid, rows=3)
    broken = m.clone()
    broken[0, 0, 7, 0] = True  # a padded query row that sees a key: not a padding mask
    assert not masks._pads_queries_and_keys(broken[:, 0], broken[:, 0].any(dim=1), rows=3)
    assert not plan.all_valid and [int(r[3]) for r in plan.rows] == [0]
    (rows, keep, pad, n_text, kept_video), = plan.rows
    assert keep.tolist() == [0, 1, 2, 3, 4] and pad.tolist() == [5, 6, 7] and kept_video == 5


def test_a_mask_made_in_every_call_is_not_kept_alive_by_the_plan_cache():
    # HunyuanVideo-1.5 builds its query-and-key mask inside every processor call (2.4 GB each at 480p): the cache
    # must not hold 54 of them for the forward, and a plan must not answer for a new mask that reuses a freed id.
    import gc
    import weakref

    from lowbit_video.models import masks

    cache = {}
    valid = torch.tensor([[True] * 5 + [False] * 3])
    first = (valid[:, :, None] & valid[:, None, :])[:, None]
    plan = masks.padding_plan(cache, first, 1, 8, None)
    assert masks.padding_plan(cache, first, 1, 8, None) is plan  # the same object: read once
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None
    other = torch.ones(1, 1, 8, 8, dtype=torch.bool)  # may be given the freed id
    assert masks.padding_plan(cache, other, 1, 8, None).all_valid and len(cache) == 1


def _chunk_causal(frame_of: torch.Tensor, real: int):
    """A FAR-style BlockMask: a query sees the keys of its frame chunk and earlier ones; the padding (past `real`)
    sees nothing."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q, k):
        return (frame_of[q] >= frame_of[k]) & (q < real) & (k < real)

    n = frame_of.shape[0]
    return create_block_mask(mask_mod, None, None, n, n, device="cpu", _compile=False)


def test_a_block_causal_block_mask_is_groups_of_queries_each_with_a_key_prefix():
    from lowbit_video.models import masks

    frame_of = torch.tensor([0] * 100 + [1] * 60 + [2] * 40 + [0] * 56)  # 200 real tokens in 3 chunks, 56 padding
    plan = masks.query_groups(_chunk_causal(frame_of, 200), 256, 256, torch.device("cpu"), rows=64)
    # hand-worked: chunk c's queries attend to every key of chunks 0..c; the padding rows to none
    assert [(g[0].tolist(), g[1].tolist()) for g in plan.groups] == [
        (list(range(0, 100)), list(range(0, 100))),
        (list(range(100, 160)), list(range(0, 160))),
        (list(range(160, 200)), list(range(0, 200)))]
    assert plan.empty.tolist() == list(range(200, 256))


def test_a_block_mask_with_too_many_key_sets_or_per_head_is_refused():
    from torch.nn.attention.flex_attention import create_block_mask

    from lowbit_video.models import masks

    causal = create_block_mask(lambda b, h, q, k: q >= k, None, None, 256, 256, device="cpu", _compile=False)
    with pytest.raises(UnsupportedMask, match="distinct key sets"):  # token-causal: a key set per query
        masks.query_groups(causal, 256, 256, torch.device("cpu"))
    per_head = create_block_mask(lambda b, h, q, k: q >= k, None, 2, 256, 256, device="cpu", _compile=False)
    with pytest.raises(UnsupportedMask, match="per batch row or head"):
        masks.query_groups(per_head, 256, 256, torch.device("cpu"))


def test_a_block_causal_block_mask_under_a_recipe_equals_flex_attention_per_group(wan, monkeypatch):
    # The hook's grouped calls under the fp16-exact dense path: what flex attention gives with the mask (the padded
    # rows zero); under mxattention each group is one recipe call on that group's queries and keys.
    from torch.nn.attention.flex_attention import flex_attention

    from lowbit_video.models import attention_hook

    frame_of = torch.tensor([0] * 64 + [1] * 64 + [0] * 128)
    mask = _chunk_causal(frame_of, 128)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 256, 2, 32, generator=g) for _ in range(3))  # BNHD
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = flex_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask).transpose(1, 2)
    t, _ = wan
    seen = []

    def dense(q_, k_, v_, *args, **kwargs):  # exact attention in place of the recipe: the grouping alone is tested
        seen.append((q_.shape[1], k_.shape[1]))
        return torch.nn.functional.scaled_dot_product_attention(q_.transpose(1, 2), k_.transpose(1, 2),
                                                                v_.transpose(1, 2)).transpose(1, 2)

    monkeypatch.setattr(attention_hook, "attend", dense)
    with use_recipe(t, _with_policy("mxattention")) as handle:
        hook = next(h for h in handle.hooks.values() if h.attention_type == "self")
        hook.quant_self = True
        with torch.no_grad():
            out = hook._attention(q, k, v, mask, scale=None, parallel_config=None, backend=None,
                                  original=lambda: None, refuse=None)
    assert seen == [(64, 64), (64, 128)] and handle.calls["quantized"] == 1
    assert torch.allclose(out, ref, atol=1e-5) and not out[:, 128:].any()


def test_rows_of_one_prompt_length_are_one_call_per_module(hunyuan, monkeypatch):
    # Both rows padded alike: one recipe call per attention module for the whole batch, equal per row to the
    # batch of one (batch rows are independent).
    from lowbit_video.models import attention_hook

    t, inputs = hunyuan
    same = dict(inputs, encoder_attention_mask=torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]]))
    batches = []
    real = attention_hook.attend
    monkeypatch.setattr(attention_hook, "attend", lambda q, *a, **kw: batches.append(q.shape[0]) or real(q, *a, **kw))
    recipe = _with_policy("mxattention")
    both, _ = _run(t, same, recipe)
    assert batches and set(batches) == {2}
    row1 = {k: (v[1:] if isinstance(v, torch.Tensor) else v) for k, v in same.items()}
    alone, _ = _run(t, row1, recipe)
    ref_both, _ = _run(t, same)
    ref_alone, _ = _run(t, row1)
    tol = (ref_both[1:] - ref_alone).abs().max().item() * 4 + 1e-6  # what batching itself changes in 16 bit
    assert (both[1:] - alone).abs().max().item() <= tol


def test_unsupported_mask_falls_back_to_the_original_kernel_with_a_warning(wan):
    # A mask that is not a key-padding mask (here: causal) cannot be expressed as a key subset; the
    # call runs the original kernel, bit-identical to the unmodified processor, and is counted.
    t, _ = wan
    attn = t.blocks[0].attn1
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 10, attn.inner_dim, generator=g)
    mask = torch.tril(torch.ones(10, 10, dtype=torch.bool)).view(1, 1, 10, 10)
    with torch.no_grad():
        ref = WanAttnProcessor()(attn, x, None, mask, None)
        with use_recipe(t, _with_policy("mxattention")) as handle:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                out = attn(x, None, mask, None)
        assert torch.equal(out, ref)
        assert handle.calls["fallback"] == 1 and handle.calls["quantized"] == 0
        assert any("not a key-padding mask" in str(x.message) for x in w)


def test_wan_key_padding_mask_in_quantized_self_attention_matches_cut_sequence(wan):
    t, _ = wan
    attn = t.blocks[0].attn1
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 12, attn.inner_dim, generator=g)
    mask = torch.tensor([True] * 8 + [False] * 4).view(1, 1, 1, 12)
    with torch.no_grad(), use_recipe(t, _with_policy("mxattention")):
        out = attn(x, None, mask, None)
        cut = attn(x[:, :8], None, None, None)
    assert torch.allclose(out[:, :8], cut, atol=1e-6)
