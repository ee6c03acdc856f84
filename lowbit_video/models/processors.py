"""Attention processors that run a recipe inside diffusers video transformers.

One processor instance per attention module, installed through diffusers' public
`set_attn_processor` (see injection.py). Each knows its block index, its attention type ("self",
"cross", or "joint" = HunyuanVideo's video+text attention, which the precision policy treats as
self-attention), the recipe and the shared `InjectionContext` (step tracker, token grid, capture
writer). Before each forward (the transformer's pre-hook) it asks `recipe.policy.quantizes(block=,
step=, num_steps=, num_blocks=, attention_type=)` once per attention type (`make_plan`); per call:

* no  -> the original kernel call, `dispatch_attention_fn(...)` with the replaced processor's
         backend and parallel config: bit-identical to the unmodified model;
* yes -> `lowbit_video.attention.attend(q, k, v, recipe, layout="BNHD", rope_segments=, geometry=)`.

Context parallelism (context_parallel.py): when the model runs with diffusers' ContextParallelConfig,
the quantized call (and the dense one under ring, which diffusers' native backend cannot do) goes
through diffusers' `_templated_context_parallel_attention` with the recipe as its forward op
(`_context_parallel`): Ulysses hands it all tokens of a head shard; ring asks for (out, lse).

The bodies of `WanRecipeProcessor.__call__` and `HunyuanVideoRecipeProcessor.__call__` are copied
from diffusers 0.42.1 (`WanAttnProcessor`, `HunyuanVideoAttnProcessor2_0`; Apache-2.0, (c) The Wan
Team, The Hunyuan Team and The HuggingFace Team) with one change: the `dispatch_attention_fn` call
goes through `_attention`. Their signatures are the exact ones of the processors they replace:
legacy `Attention` (HunyuanVideo) passes only the keyword arguments the processor declares, so a
generic `*args, **kwargs` processor would silently lose `image_rotary_emb` (no RoPE).

Padding masks (HunyuanVideo pads the prompt to a fixed length and masks padded text keys): the
quantized path honours any key-padding mask exactly. Per batch row, the valid tokens attend to the
valid keys under the recipe; the padded text rows (whose outputs only ever reach other padded
rows, never a video token) attend to the valid keys in dense 16-bit math. A mask that is not a
key-padding mask (it varies across queries or heads) makes that call fall back to the original
kernel, with a warning and a count in the context's stats.

How a recipe behaves here is its row of the kernel dispatch table (lowbit_video/kernels/dispatch.py),
read once per installation: recipes whose row needs the video geometry (DraftAttention2) get
`VideoGeometry(frames, height, width, prefix)` from the latent token grid of the current forward;
HunyuanVideo's text (which follows the video) is rotated to the front for the call and back afterwards,
as VideoGeometry expects. They apply to self/joint attention only (cross-attention stays 16-bit) and
need every token of the video at once (no ring context parallelism).
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F

from ..attention import VideoGeometry, attend
from ..errors import ShapeError, UserError
from ..kernels import dispatch
from ..recipes import Recipe
from .capture import CaptureWriter
from .steps import StepTracker

try:  # the kernel call of the processors we replace
    from diffusers.models.attention_dispatch import dispatch_attention_fn
    from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoAttnProcessor2_0
    from diffusers.models.transformers.transformer_wan import (WanAttnProcessor, _get_added_kv_projections,
                                                               _get_qkv_projections)
except ImportError as e:  # pragma: no cover - diffusers is a dependency
    raise ImportError(f"lowbit_video.models.processors needs diffusers 0.42 ({e})") from e


def recipe_changes_attention(recipe: Recipe) -> bool:
    """False for exact recipes (fp16: plain softmax attention): they run the original kernel everywhere."""
    return not dispatch.variant_of(recipe.attention).exact


class InjectionContext:
    """State shared by the processors of one installation (one `generate` call)."""

    def __init__(self, recipe: Recipe, tracker: StepTracker, *, capture: CaptureWriter | None = None) -> None:
        self.recipe = recipe
        self.tracker = tracker
        self.capture = capture
        self.dispatch = dispatch.variant_of(recipe.attention)  # the recipe's row of the kernel dispatch table
        self.changes = not self.dispatch.exact
        self.grid: tuple[int, int, int] | None = None  # latent token grid of the running forward
        self.forward_index = 0  # index of the running forward within its denoising step
        self.expert = "transformer"  # which transformer of the pipeline runs (Wan2.2 A14B: two)
        # Global prompt index of each conditional batch row; the sampler sets it per batch.
        self.batch_prompts: list[int] = [0]
        # (expert, block, step, attention_type, "quantized" | "high" | "fallback" | "engine") -> number of calls
        self.stats: Counter = Counter()
        self._warned: set[str] = set()
        self.injection: Any = None  # the Injection that installed the processors (injection.py)

    def quantizes(self, *, block: int, num_blocks: int, attention_type: str) -> bool:
        if not self.changes:
            return False
        if self.dispatch.geometry and attention_type == "cross":
            return False  # a recipe laid out by the video geometry has no layout for text keys
        policy_type = "cross" if attention_type == "cross" else "self"
        return self.recipe.policy.quantizes(block=block, step=self.tracker.step, num_steps=self.tracker.num_steps,
                                            num_blocks=num_blocks, attention_type=policy_type)

    def row_labels(self, batch: int) -> list[tuple[int, str]]:
        """(prompt index, "cond" | "uncond") of each batch row of the running forward.

        Wan/HunyuanVideo pipelines run the conditional pass first and the unconditional one as a
        second forward of the same step; tiny-shapes batches them as [cond rows; uncond rows]."""
        n = len(self.batch_prompts)
        if batch == n:
            branch = "cond" if self.forward_index == 0 else "uncond"
            return [(p, branch) for p in self.batch_prompts]
        if batch == 2 * n:
            return [(p, "cond") for p in self.batch_prompts] + [(p, "uncond") for p in self.batch_prompts]
        return [(i, "cond") for i in range(batch)]

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def summary(self) -> dict[str, Any]:
        """JSON-ready counts of attention calls by precision and by step."""
        # "engine": quantized calls on a CUDA device that no kernel could take, so the float64 reference
        # engine ran them (a part of "quantized"; at video sizes such a call takes minutes, so it is counted)
        out: dict[str, Any] = {"quantized": 0, "high": 0, "fallback": 0, "engine": 0, "by_step": {}, "by_expert": {}}
        for (expert, block, step, kind, how), n in sorted(self.stats.items()):
            out[how] += n
            for key, table in ((str(step), out["by_step"]), (expert, out["by_expert"])):
                table.setdefault(key, {"quantized": 0, "high": 0, "fallback": 0, "engine": 0})[how] += n
        out["num_steps"] = self.tracker.num_steps
        return out


@functools.cache
def _dense_recipe() -> Recipe:
    """The unquantized recipe (torch SDPA in the inputs' dtype), parsed once (recipes are frozen)."""
    from ..recipes import load_recipe

    return load_recipe("fp16")


# ------------------------------------------------------------------------------ mask handling


class _UnsupportedMask(Exception):
    pass


def key_padding(mask: torch.Tensor | None, batch: int, n_keys: int) -> torch.Tensor | None:
    """(batch, n_keys) bool of the keys a mask keeps, if it is a key-padding mask; None if no mask.

    Accepts bool masks (True = keep), integer masks (nonzero = keep) and additive float masks
    (0 = keep, <= -1e4 or -inf = drop) of shape (B|1, Nk), (B|1, 1|Nq, Nk) or (B|1, 1|H, 1|Nq, Nk)
    that are the same for every query and head. Raises _UnsupportedMask otherwise."""
    if mask is None:
        return None
    m = mask
    if m.dtype != torch.bool:
        if m.is_floating_point():
            keep, drop = m == 0, m <= -1e4
            if not bool((keep | drop).all()):
                raise _UnsupportedMask("additive mask with values other than 0 and -inf")
            m = keep
        else:
            m = m != 0
    if m.dim() < 2 or m.dim() > 4 or m.shape[-1] != n_keys or m.shape[0] not in (1, batch):
        raise _UnsupportedMask(f"mask of shape {tuple(mask.shape)}")
    m = m.reshape(m.shape[0], -1, n_keys)
    if m.shape[1] > 1 and not bool((m == m[:, :1]).all()):
        raise _UnsupportedMask("mask varies across queries or heads")
    return m[:, 0].expand(batch, n_keys)


def _bnhd_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Dense attention in the inputs' dtype, BNHD in and out."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


# ---------------------------------------------------------------------------------- processors


class _RecipeProcessorMixin:
    """Decision, capture and the quantized kernel, shared by the family processors."""

    ctx: InjectionContext
    block_index: int
    attention_type: str  # "self" | "cross" | "joint"
    num_blocks: int
    rope_segments: tuple[int, ...] | None

    def _bind(self, ctx: InjectionContext, *, block_index: int, attention_type: str, num_blocks: int,
              rope_segments: tuple[int, ...] | None, expert: str, replaced: Any) -> None:
        self.ctx = ctx
        self.block_index = int(block_index)
        self.attention_type = attention_type
        self.num_blocks = int(num_blocks)
        self.rope_segments = tuple(rope_segments) if rope_segments else None
        self.expert = expert
        self.replaced = replaced
        self.make_plan()
        # Keep what diffusers set on the processor we replace (attention backend, context parallel).
        for attr in ("_attention_backend", "_parallel_config"):
            if replaced is not None and attr in vars(replaced):
                setattr(self, attr, getattr(replaced, attr))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(block={self.block_index}, type={self.attention_type}, "
                f"recipe={self.ctx.recipe.name!r}, expert={self.expert!r})")

    # -- the precision policy, per forward

    def make_plan(self) -> None:
        """Decide, for the step about to run, which of this module's calls the recipe quantizes (`plan`: attention
        type -> bool). The transformer's forward pre-hook calls it before every forward (injection.py), so a call
        reads one boolean: under torch.compile a compiled block then depends on that decision only, not on the block
        index or the step, and one graph serves every block and step with the same decision."""
        self.plan = {kind: self.ctx.quantizes(block=self.block_index, num_blocks=self.num_blocks, attention_type=kind)
                     for kind in {self.attention_type, "cross"}}  # "cross": Wan I2V's image keys, in any module

    def _count(self, attention_type: str, how: str) -> None:
        """One call in the context's counts. Not under torch.compile: the counts, the block index and the step are
        Python values dynamo would guard on, compiling the block again as each changes (past its recompile limit the
        block runs eagerly), so compiled calls go uncounted."""
        if torch.compiler.is_compiling():
            return
        self.ctx.stats[(self.expert, self.block_index, self.ctx.tracker.step, attention_type, how)] += 1

    # -- the one place where attention is computed

    def _attention(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
                   *, attention_type: str, parallel_config: Any, text_tokens: int = 0) -> torch.Tensor:
        """Attention of BNHD query/key/value; `text_tokens` trailing tokens are text (HunyuanVideo)."""
        ctx = self.ctx
        quant = self.plan[attention_type]
        if ctx.capture is not None and attention_type in ("self", "joint"):
            self._capture(query, key, value, attn_mask, text_tokens=text_tokens, quantized=quant)
        cp = getattr(parallel_config, "context_parallel_config", None) if parallel_config is not None else None
        if quant and cp is not None:
            self._count(attention_type, "quantized")
            return self._context_parallel(query, key, value, attn_mask, parallel_config, quantized=True,
                                          attention_type=attention_type)
        if quant:
            try:
                valid = key_padding(attn_mask, query.shape[0], key.shape[1])
            except _UnsupportedMask as e:
                ctx.warn_once("mask", f"attention mask is not a key-padding mask ({e}); those calls run unquantized")
                self._count(attention_type, "fallback")
            else:
                self._count(attention_type, "quantized")
                return self._quantized(query, key, value, valid, attention_type=attention_type,
                                       text_tokens=text_tokens)
        else:
            self._count(attention_type, "high")
        if cp is not None and cp.ring_degree > 1 and self._attention_backend in (None, "native"):
            # diffusers' native backend has no log-sum-exp, which ring attention needs: dense op here
            return self._context_parallel(query, key, value, attn_mask, parallel_config, quantized=False,
                                          attention_type=attention_type)
        return dispatch_attention_fn(query, key, value, attn_mask=attn_mask, dropout_p=0.0, is_causal=False,
                                     backend=self._attention_backend, parallel_config=parallel_config)

    def _context_parallel(self, query, key, value, attn_mask, parallel_config, *, quantized: bool,
                          attention_type: str) -> torch.Tensor:
        """Attention of this rank's sequence shard through diffusers' context-parallel helper
        (`_templated_context_parallel_attention`), with our op as its forward op: Ulysses hands it
        every token of a subset of heads (the recipe runs unchanged); ring hands it the local queries
        against one key/value chunk at a time and merges chunks with the returned log-sum-exp."""
        from diffusers.models.attention_dispatch import _templated_context_parallel_attention

        if attn_mask is not None:
            raise UserError("context parallelism with an attention mask is not supported yet")
        ring = parallel_config.context_parallel_config.ring_degree > 1
        if quantized and self.ctx.dispatch.geometry and ring:
            raise UserError(f"{self.ctx.dispatch.name} recipes need every token of the video at once: use "
                            "--context-parallel ulysses")
        proc = self

        def forward_op(op_ctx, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, return_lse=False,
                       _save_ctx=True, _parallel_config=None):
            if not quantized:  # dense, in the inputs' dtype (as the native backend), LSE in float32
                return attend(q, k, v, _dense_recipe(), layout="BNHD", scale=scale, return_lse=return_lse)
            if not return_lse:
                return proc._attend(q, k, v, attention_type=attention_type, text_tokens=0)
            # ring: the recipe's kernel with the LSE its epilogue writes (on CUDA), merged by diffusers
            proc._count_engine(q, k, None, attention_type)
            return attend(q, k, v, proc.ctx.recipe, layout="BNHD", scale=scale, rope_segments=proc.rope_segments,
                          return_lse=True)

        def backward_op(*args, **kwargs):
            raise NotImplementedError("lowbit-video attention is inference-only (no backward)")

        return _templated_context_parallel_attention(query, key, value, None, 0.0, False, None, False, False,
                                                     forward_op=forward_op, backward_op=backward_op,
                                                     _parallel_config=parallel_config)

    def _quantized(self, q, k, v, valid, *, attention_type: str, text_tokens: int) -> torch.Tensor:
        same_tokens = q.shape[1] == k.shape[1]
        if valid is None or bool(valid.all()):
            return self._attend(q, k, v, attention_type=attention_type, text_tokens=text_tokens)
        out = torch.empty_like(q)
        n_keys = k.shape[1]
        for b in range(q.shape[0]):
            keep = valid[b].nonzero().squeeze(1)
            kb, vb = k[b:b + 1, keep], v[b:b + 1, keep]
            if not same_tokens:  # cross-attention: every query against the valid keys
                out[b:b + 1] = self._attend(q[b:b + 1], kb, vb, attention_type=attention_type, text_tokens=0)
                continue
            valid_text = int(valid[b, n_keys - text_tokens:].sum()) if text_tokens else 0
            if text_tokens and not bool(valid[b, : n_keys - text_tokens].all()):
                raise ShapeError("the attention mask drops video tokens; only text padding is supported")
            out[b:b + 1, keep] = self._attend(q[b:b + 1, keep], kb, vb, attention_type=attention_type,
                                              text_tokens=valid_text)
            pad = (~valid[b]).nonzero().squeeze(1)
            # Padded (text) rows: dense 16-bit over the valid keys, exactly what the masked kernel
            # gives them; they never feed a valid token.
            out[b:b + 1, pad] = _bnhd_sdpa(q[b:b + 1, pad], kb, vb).to(out.dtype)
        return out

    def _attend(self, q, k, v, *, attention_type: str, text_tokens: int) -> torch.Tensor:
        recipe = self.ctx.recipe
        if not self.ctx.dispatch.geometry:
            self._count_engine(q, k, None, attention_type)
            return attend(q, k, v, recipe, layout="BNHD", rope_segments=self.rope_segments)
        grid = self.ctx.grid
        n = q.shape[1]
        if grid is None or grid[0] * grid[1] * grid[2] + text_tokens != n or k.shape[1] != n:
            raise ShapeError(f"{self.ctx.dispatch.name} recipe: cannot lay out {n} tokens as the video grid {grid} "
                             f"plus {text_tokens} text tokens")
        geometry = VideoGeometry(int(grid[0]), int(grid[1]), int(grid[2]), prefix=int(text_tokens))
        self._count_engine(q, k, geometry, attention_type)
        if not text_tokens:
            return attend(q, k, v, recipe, layout="BNHD", rope_segments=self.rope_segments, geometry=geometry)
        # Text follows the video here; VideoGeometry wants it first.
        front = lambda t: torch.cat([t[:, n - text_tokens:], t[:, : n - text_tokens]], dim=1)
        out = attend(front(q), front(k), front(v), recipe, layout="BNHD", rope_segments=self.rope_segments,
                     geometry=geometry)
        return torch.cat([out[:, text_tokens:], out[:, :text_tokens]], dim=1)

    def _count_engine(self, q, k, geometry, attention_type: str) -> None:
        """Count (and say once) a quantized call on CUDA that `attend` will give the float64 engine. Not under
        torch.compile: the dispatch table's device checks are host work dynamo does not trace (the recipe's custom op
        still runs the engine where no kernel takes a call)."""
        if not q.is_cuda or torch.compiler.is_compiling():
            return
        spec = self.ctx.recipe.attention
        qb, kb = q.transpose(1, 2), k.transpose(1, 2)  # BHND views, as attend passes them on
        if dispatch.kernel_runs(spec, qb, kb, geometry):
            return
        ctx = self.ctx
        self._count(attention_type, "engine")
        why = (dispatch.supports(spec, q.device, q.shape[-1])[1]
               or dispatch.refuse_call(dispatch.variant_of(spec), qb, kb, geometry) or "no kernel for this call")
        ctx.warn_once("engine", f"{ctx.recipe.name}: no kernel takes these calls ({why}); they run on the float64 "
                      "reference engine on the GPU (exact, slow; counted as 'engine' in the attention calls)")

    # -- captures

    def _capture(self, q, k, v, attn_mask, *, text_tokens: int, quantized: bool) -> None:
        ctx = self.ctx
        cap, tracker = ctx.capture, ctx.tracker
        try:
            valid = key_padding(attn_mask, q.shape[0], k.shape[1])
        except _UnsupportedMask:
            valid = None
        for row, (prompt, branch) in enumerate(ctx.row_labels(q.shape[0])):
            if not cap.wants(block=self.block_index, step=tracker.step, num_steps=tracker.num_steps,
                             num_blocks=self.num_blocks, prompt=prompt, branch=branch):
                continue
            qb, kb, vb = q[row:row + 1], k[row:row + 1], v[row:row + 1]
            n_text = text_tokens
            if valid is not None and q.shape[1] == k.shape[1] and not bool(valid[row].all()):
                keep = valid[row].nonzero().squeeze(1)
                qb, kb, vb = qb[:, keep], kb[:, keep], vb[:, keep]
                n_text = int(valid[row, k.shape[1] - text_tokens:].sum()) if text_tokens else 0
            info = {
                "attention_type": self.attention_type, "quantized": quantized, "expert": self.expert,
                "grid": list(ctx.grid) if ctx.grid else None, "video_tokens": int(qb.shape[1]) - n_text,
                "text_tokens": n_text, "rope_segments": list(self.rope_segments) if self.rope_segments else None,
            }
            cap.save(block=self.block_index, step=tracker.step, num_steps=tracker.num_steps, prompt=prompt,
                     branch=branch, q=qb, k=kb, v=vb, info=info)


class WanRecipeProcessor(_RecipeProcessorMixin, WanAttnProcessor):
    """Replaces `WanAttnProcessor` on a `WanAttention` module (attn1 self, attn2 cross)."""

    def __init__(self, ctx: InjectionContext, *, block_index: int, attention_type: str, num_blocks: int,
                 rope_segments: tuple[int, ...] | None = None, expert: str = "transformer", replaced: Any = None):
        super().__init__()
        self._bind(ctx, block_index=block_index, attention_type=attention_type, num_blocks=num_blocks,
                   rope_segments=rope_segments, expert=expert, replaced=replaced)

    # Body: diffusers 0.42.1 WanAttnProcessor.__call__ (Apache-2.0), kernel calls via _attention.
    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        encoder_hidden_states_img = None
        if attn.add_k_proj is not None:
            # 512 is the context length of the text encoder, hardcoded for now
            image_context_length = encoder_hidden_states.shape[1] - 512
            encoder_hidden_states_img = encoder_hidden_states[:, :image_context_length]
            encoder_hidden_states = encoder_hidden_states[:, image_context_length:]

        query, key, value = _get_qkv_projections(attn, hidden_states, encoder_hidden_states)

        query = attn.norm_q(query)
        key = attn.norm_k(key)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        if rotary_emb is not None:

            def apply_rotary_emb(
                hidden_states: torch.Tensor,
                freqs_cos: torch.Tensor,
                freqs_sin: torch.Tensor,
            ):
                x1, x2 = hidden_states.unflatten(-1, (-1, 2)).unbind(-1)
                cos = freqs_cos[..., 0::2]
                sin = freqs_sin[..., 1::2]
                out = torch.empty_like(hidden_states)
                out[..., 0::2] = x1 * cos - x2 * sin
                out[..., 1::2] = x1 * sin + x2 * cos
                return out.type_as(hidden_states)

            query = apply_rotary_emb(query, *rotary_emb)
            key = apply_rotary_emb(key, *rotary_emb)

        # I2V task
        hidden_states_img = None
        if encoder_hidden_states_img is not None:
            key_img, value_img = _get_added_kv_projections(attn, encoder_hidden_states_img)
            key_img = attn.norm_added_k(key_img)

            key_img = key_img.unflatten(2, (attn.heads, -1))
            value_img = value_img.unflatten(2, (attn.heads, -1))

            hidden_states_img = self._attention(query, key_img, value_img, None, attention_type="cross",
                                                parallel_config=None)
            hidden_states_img = hidden_states_img.flatten(2, 3)
            hidden_states_img = hidden_states_img.type_as(query)

        hidden_states = self._attention(
            query, key, value, attention_mask, attention_type=self.attention_type,
            # Reference: https://github.com/huggingface/diffusers/pull/12909
            parallel_config=(self._parallel_config if encoder_hidden_states is None else None),
        )
        hidden_states = hidden_states.flatten(2, 3)
        hidden_states = hidden_states.type_as(query)

        if hidden_states_img is not None:
            hidden_states = hidden_states + hidden_states_img

        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states


class HunyuanVideoRecipeProcessor(_RecipeProcessorMixin, HunyuanVideoAttnProcessor2_0):
    """Replaces `HunyuanVideoAttnProcessor2_0` on the joint attention of HunyuanVideo's dual- and
    single-stream blocks (not on the token refiner, which sees text only)."""

    def __init__(self, ctx: InjectionContext, *, block_index: int, attention_type: str = "joint", num_blocks: int,
                 rope_segments: tuple[int, ...] | None = None, expert: str = "transformer", replaced: Any = None):
        super().__init__()
        self._bind(ctx, block_index=block_index, attention_type=attention_type, num_blocks=num_blocks,
                   rope_segments=rope_segments, expert=expert, replaced=replaced)

    # Body: diffusers 0.42.1 HunyuanVideoAttnProcessor2_0.__call__ (Apache-2.0), kernel via _attention.
    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        image_rotary_emb: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if attn.add_q_proj is None and encoder_hidden_states is not None:
            hidden_states = torch.cat([hidden_states, encoder_hidden_states], dim=1)

        # 1. QKV projections
        query = attn.to_q(hidden_states)
        key = attn.to_k(hidden_states)
        value = attn.to_v(hidden_states)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        # 2. QK normalization
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)

        # 3. Rotational positional embeddings applied to latent stream
        if image_rotary_emb is not None:
            from diffusers.models.embeddings import apply_rotary_emb

            if attn.add_q_proj is None and encoder_hidden_states is not None:
                query = torch.cat(
                    [
                        apply_rotary_emb(query[:, : -encoder_hidden_states.shape[1]], image_rotary_emb, sequence_dim=1),
                        query[:, -encoder_hidden_states.shape[1]:],
                    ],
                    dim=1,
                )
                key = torch.cat(
                    [
                        apply_rotary_emb(key[:, : -encoder_hidden_states.shape[1]], image_rotary_emb, sequence_dim=1),
                        key[:, -encoder_hidden_states.shape[1]:],
                    ],
                    dim=1,
                )
            else:
                query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
                key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)

        # 4. Encoder condition QKV projection and normalization
        if attn.add_q_proj is not None and encoder_hidden_states is not None:
            encoder_query = attn.add_q_proj(encoder_hidden_states)
            encoder_key = attn.add_k_proj(encoder_hidden_states)
            encoder_value = attn.add_v_proj(encoder_hidden_states)

            encoder_query = encoder_query.unflatten(2, (attn.heads, -1))
            encoder_key = encoder_key.unflatten(2, (attn.heads, -1))
            encoder_value = encoder_value.unflatten(2, (attn.heads, -1))

            if attn.norm_added_q is not None:
                encoder_query = attn.norm_added_q(encoder_query)
            if attn.norm_added_k is not None:
                encoder_key = attn.norm_added_k(encoder_key)

            query = torch.cat([query, encoder_query], dim=1)
            key = torch.cat([key, encoder_key], dim=1)
            value = torch.cat([value, encoder_value], dim=1)

        # 5. Attention
        hidden_states = self._attention(
            query, key, value, attention_mask, attention_type=self.attention_type,
            parallel_config=self._parallel_config,
            text_tokens=encoder_hidden_states.shape[1] if encoder_hidden_states is not None else 0,
        )
        hidden_states = hidden_states.flatten(2, 3)
        hidden_states = hidden_states.to(query.dtype)

        # 6. Output projection
        if encoder_hidden_states is not None:
            hidden_states, encoder_hidden_states = (
                hidden_states[:, : -encoder_hidden_states.shape[1]],
                hidden_states[:, -encoder_hidden_states.shape[1]:],
            )

            if getattr(attn, "to_out", None) is not None:
                hidden_states = attn.to_out[0](hidden_states)
                hidden_states = attn.to_out[1](hidden_states)

            if getattr(attn, "to_add_out", None) is not None:
                encoder_hidden_states = attn.to_add_out(encoder_hidden_states)

        return hidden_states, encoder_hidden_states


__all__ = ["HunyuanVideoRecipeProcessor", "InjectionContext", "WanRecipeProcessor", "key_padding",
           "recipe_changes_attention"]
