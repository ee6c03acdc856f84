"""The recipe's attention inside any diffusers video transformer: a diffusers `ModelHook` on each attention module
that takes the attention call over at the kernel boundary, leaving the model's processor (projections, norms,
RoPE, masks) untouched.

One hook per attention module (`RecipeAttentionHook`, installed by injection.py: through torch's forward pre- and
post-hooks on the dispatch route, through diffusers' `HookRegistry` on the SDPA route) knows its block index, whether the module is declared cross-attention, the policy's decision for
the running step (two booleans, `quant_self` / `quant_cross`, set by the transformer's pre-hook before each
forward, so that a compiled block depends on them only) and the shared `InjectionContext`. During the module's
forward it catches the attention call where the processor makes it:

* `dispatch_attention_fn` (25 of the 31 video transformers of diffusers 0.42.1; (B, S, H, D) tensors): the name
  the processor's module looks up is bound, while a recipe is installed, to a `DispatchInterposer` kept in that
  module's namespace. The interposer hands a call to the hook whose module is running in this thread and calls
  diffusers' function for every other call (other modules, other threads, after the forward). It is shared by
  every installation on that module and put back to diffusers' function when the last one is removed.
* `F.scaled_dot_product_attention` called by the processor itself (CogVideoX, ConsisID, Latte, Allegro,
  EasyAnimate, Mochi; (B, H, S, D)): a `TorchFunctionMode` entered for the module's forward only, as diffusers'
  hooks/layer_skip.py does.

Both reach `_attention`, which decides per call: a call whose query and key token counts differ, or a module
declared cross-attention, is "cross"; else "joint" where the facts table says text is concatenated to the video
(families.py), else "self". Kept in 16 bit by the policy -> diffusers' own call, bit-identical to the untouched
model. Quantized -> `lowbit_video.attention.attend(q, k, v, recipe, layout="BNHD", rope_segments=, geometry=)`.
A call the quantized path cannot express (a mask that is not a key-padding mask, causal, dropout, grouped-query
heads, a head_dim the recipe's blocks do not divide) runs diffusers' call and is counted as "fallback".

Block masks (AnyFlow's FAR transformer passes flex attention a block-causal BlockMask over frame chunks): the
queries split into groups attending to one key set each (masks.query_groups), one recipe call per group.

Padding masks (HunyuanVideo pads the prompt and masks the padded text keys): `attend` takes no mask, so per
batch row the valid tokens attend to the valid keys under the recipe and the padded rows (whose outputs reach
only other padded rows) attend to the valid keys in dense 16-bit math, which is what the masked kernel gives
them. The valid keys are read off the mask on the host once per mask and forward (masks.padding_plan: a model
passes one mask object to all its blocks), so the calls themselves gather by device indices without a host sync.

Context parallelism (context_parallel.py): with diffusers' ContextParallelConfig on the model, the quantized call
(and the dense one under ring, which diffusers' native backend cannot do) goes through diffusers'
`_templated_context_parallel_attention` with the recipe as its forward op: Ulysses hands it all tokens of a head
shard; ring asks for (out, lse).

Draft recipes (their dispatch row needs the video geometry) get `VideoGeometry(frames, height, width, prefix)`
from the latent token grid of the running forward; joint text is moved to the front for the call where it
follows the video. They apply to self/joint attention only and need every token at once (no ring).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch
import torch.nn.functional as F
from diffusers.hooks.hooks import ModelHook
from torch.overrides import TorchFunctionMode

from ..attention import VideoGeometry, attend
from ..errors import ShapeError, UserError, inference_only
from ..kernels import dispatch
from .injection_context import InjectionContext, dense_recipe
from .masks import QueryGroupPlan, UnsupportedMask, key_padding, padding_plan

HOOK_NAME = "lowbit_video.recipe_attention"
HOOK_ATTRIBUTE = "_lowbit_video_recipe_hook"  # where a dispatch-route module holds its hook


# The dispatch route enters and leaves a module's forward through torch's own module hooks, one pair of functions
# shared by every module (the hook is read off the module): under torch.compile a block then looks the same to
# dynamo in every block, and regional compilation makes one graph for all of them. diffusers' HookRegistry instead
# replaces each module's `forward` with a partial of its own, which dynamo guards by identity (a graph per block).
def enter_module(module: torch.nn.Module, args, kwargs) -> None:
    getattr(module, HOOK_ATTRIBUTE).enter()


def leave_module(module: torch.nn.Module, args, kwargs, output) -> None:
    getattr(module, HOOK_ATTRIBUTE).leave()
DISPATCH_NAME = "dispatch_attention_fn"


# ---------------------------------------------------------------------------------------- catching the call


class DispatchInterposer:
    """Stands in for `dispatch_attention_fn` in one diffusers module's namespace while recipes are installed."""

    def __init__(self, namespace: dict, original: Callable) -> None:
        self.namespace = namespace
        self.original = original
        self.users = 0
        self.active: "RecipeAttentionHook | None" = None  # the hook whose module's forward is running
        self.thread = 0  # the thread running it (checked in eager calls)

    @classmethod
    def attach(cls, namespace: dict) -> "DispatchInterposer":
        current = namespace[DISPATCH_NAME]
        ip = current if isinstance(current, cls) else cls(namespace, current)
        namespace[DISPATCH_NAME] = ip
        ip.users += 1
        return ip

    def detach(self) -> None:
        self.users -= 1
        if self.users == 0 and self.namespace.get(DISPATCH_NAME) is self:
            self.namespace[DISPATCH_NAME] = self.original

    def __call__(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False, attention_kwargs=None, *, backend=None, parallel_config=None):
        hook = self.active
        if hook is not None and (torch.compiler.is_compiling() or self.thread == threading.get_ident()):
            return hook.on_dispatch(self.original, query, key, value, attn_mask, dropout_p, is_causal, scale,
                                    enable_gqa, attention_kwargs, backend, parallel_config)
        return self.original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                             scale=scale, enable_gqa=enable_gqa, attention_kwargs=attention_kwargs, backend=backend,
                             parallel_config=parallel_config)


class _SDPAMode(TorchFunctionMode):
    """Hands `F.scaled_dot_product_attention` calls made during one module's forward to its hook."""

    def __init__(self, hook: "RecipeAttentionHook") -> None:
        super().__init__()
        self.hook = hook

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            return self.hook.on_sdpa(func, *args, **kwargs)
        return func(*args, **kwargs)


def _sdpa_args(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


# ---------------------------------------------------------------------------------------------------- the hook


class RecipeAttentionHook(ModelHook):
    """The recipe's attention in one attention module (see the module docstring)."""

    def __init__(self, ctx: InjectionContext, *, name: str, block_index: int, declared_cross: bool, num_blocks: int,
                 rope_segments: tuple[int, ...] | None, text: str | None, expert: str = "transformer",
                 interposer: DispatchInterposer | None = None, parallel_config: Any = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.name = name
        self.block_index = int(block_index)
        self.declared_cross = bool(declared_cross)
        self.self_type = "joint" if text in ("before", "after") else "self"  # what a same-length call is
        self.attention_type = "cross" if declared_cross else self.self_type
        self.num_blocks = int(num_blocks)
        self.rope_segments = tuple(rope_segments) if rope_segments else None
        self.text = text
        self.expert = expert
        self.interposer = interposer
        self.parallel_config = parallel_config  # the model's, for calls that do not pass theirs (SDPA route)
        self.quant_self = False
        self.quant_cross = False
        self.make_plan()

    def __repr__(self) -> str:
        return (f"RecipeAttentionHook(block={self.block_index}, type={self.attention_type}, "
                f"recipe={self.ctx.recipe.name!r}, expert={self.expert!r}, "
                f"via={'dispatch_attention_fn' if self.interposer is not None else 'sdpa'})")

    # -- the precision policy, per forward

    def make_plan(self) -> None:
        """Decide, for the step about to run, which of this module's calls the recipe quantizes. The transformer's
        forward pre-hook calls it before every forward (injection.py), so a call reads one boolean: under
        torch.compile a compiled block then depends on that decision only, not on the block index or the step."""
        kw = dict(block=self.block_index, num_blocks=self.num_blocks)
        self.quant_self = self.ctx.quantizes(attention_type=self.self_type, **kw)
        self.quant_cross = self.ctx.quantizes(attention_type="cross", **kw)

    # -- the module's forward, with the attention call caught

    def new_forward(self, module: torch.nn.Module, *args, **kwargs):
        """The SDPA route (installed through diffusers' HookRegistry): the module's forward inside the mode."""
        with _SDPAMode(self):
            return self.fn_ref.original_forward(*args, **kwargs)

    def enter(self) -> None:
        """The dispatch route, as the module's forward starts: this hook takes the interposer's calls."""
        ip = self.interposer
        self._outer = (ip.active, ip.thread)
        ip.active = self
        if not torch.compiler.is_compiling():
            ip.thread = threading.get_ident()

    def leave(self) -> None:
        """The dispatch route, as the module's forward ends (also by an exception)."""
        ip = self.interposer
        active, thread = self._outer
        ip.active = active
        if not torch.compiler.is_compiling():
            ip.thread = thread

    def on_dispatch(self, original, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                    attention_kwargs, backend, parallel_config):
        def call_original():
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa, attention_kwargs=attention_kwargs, backend=backend,
                            parallel_config=parallel_config)

        return self._attention(query, key, value, attn_mask, scale=scale, parallel_config=parallel_config,
                               backend=backend, original=call_original,
                               refuse=_refusal(query, key, dropout_p, is_causal, enable_gqa, 2))

    def on_sdpa(self, func, *args, **kwargs):
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa = _sdpa_args(*args, **kwargs)
        refuse = _refusal(query, key, dropout_p, is_causal, enable_gqa, 1)
        if refuse == "not 4-D":
            self._count(self.attention_type, "fallback", refuse)
            return func(*args, **kwargs)
        out = self._attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_mask,
                              scale=scale, parallel_config=None, backend=None,
                              original=lambda: func(*args, **kwargs).transpose(1, 2), refuse=refuse)
        return out.transpose(1, 2)

    # -- counts

    def _count(self, attention_type: str, how: str, reason: str | None = None) -> None:
        """One call in the context's counts (`reason`: why a fallback ran the original kernel). Not under
        torch.compile: the counts, the block index and the step are Python values dynamo would guard on, compiling
        the block again as each changes, so compiled calls go uncounted."""
        if torch.compiler.is_compiling():
            return
        self.ctx.stats[(self.expert, self.block_index, self.ctx.tracker.step, attention_type, how)] += 1
        if reason is not None:
            self.ctx.fallback_reasons[reason] += 1

    # -- the one place where attention is computed

    def _attention(self, query, key, value, attn_mask, *, scale, parallel_config, backend, original: Callable,
                   refuse: str | None) -> torch.Tensor:
        """Attention of BNHD query/key/value: the recipe's, or `original()` (diffusers' call, BNHD out)."""
        ctx = self.ctx
        cross = self.declared_cross or query.shape[1] != key.shape[1]
        kind = "cross" if cross else self.self_type
        quant = self.quant_cross if cross else self.quant_self
        if quant and refuse is None and query.shape[-1] % ctx.head_dim_multiple:
            refuse = f"head_dim {query.shape[-1]} is not a multiple of {ctx.head_dim_multiple}"
        text_tokens = 0 if cross else self._text_tokens(query.shape[1])
        if ctx.capture is not None and not cross:
            self._capture(query, key, value, attn_mask, text_tokens=text_tokens, quantized=quant and refuse is None)
        cp = getattr(parallel_config, "context_parallel_config", None) if parallel_config is not None else None
        if quant and refuse is None and cp is not None:
            self._count(kind, "quantized")
            return self._context_parallel(query, key, value, attn_mask, parallel_config, quantized=True,
                                          attention_type=kind, scale=scale)
        if quant and refuse is None:
            text = self._text_slice(key.shape[1], text_tokens) if text_tokens else None
            try:
                plan = padding_plan(ctx.mask_plans, attn_mask, query.shape[0], key.shape[1], text,
                                    n_queries=query.shape[1], device=query.device)
                if isinstance(plan, QueryGroupPlan) and (ctx.dispatch.geometry or text_tokens):
                    raise UnsupportedMask("a BlockMask splits the video grid the draft layout or the joint text "
                                          "needs whole")
            except UnsupportedMask as e:
                ctx.warn_once("mask", f"attention mask is not a key-padding mask ({e}); those calls run unquantized")
                self._count(kind, "fallback", f"a mask that is not key padding ({e})")
            else:
                self._count(kind, "quantized")
                return self._quantized(query, key, value, plan, attention_type=kind, text_tokens=text_tokens,
                                       scale=scale)
        elif quant:
            ctx.warn_once(f"refuse:{refuse}", f"{ctx.recipe.name}: attention calls with {refuse} run unquantized")
            self._count(kind, "fallback", refuse)
        else:
            self._count(kind, "high")
        if cp is not None and cp.ring_degree > 1 and backend in (None, "native"):
            # diffusers' native backend has no log-sum-exp, which ring attention needs: dense op here
            return self._context_parallel(query, key, value, attn_mask, parallel_config, quantized=False,
                                          attention_type=kind, scale=scale)
        return original()

    def _text_tokens(self, n: int) -> int:
        """How many of a same-length call's n tokens are text: n minus the video grid's tokens in joint attention."""
        grid = self.ctx.grid
        if self.self_type != "joint" or grid is None:
            return 0
        return max(n - grid[0] * grid[1] * grid[2], 0)

    def _context_parallel(self, query, key, value, attn_mask, parallel_config, *, quantized: bool,
                          attention_type: str, scale) -> torch.Tensor:
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
        hook = self

        def forward_op(op_ctx, q, k, v, mask, dropout_p, is_causal, op_scale, enable_gqa, return_lse=False,
                       _save_ctx=True, _parallel_config=None):
            if not quantized:  # dense, in the inputs' dtype (as the native backend), LSE in float32
                return attend(q, k, v, dense_recipe(), layout="BNHD", scale=op_scale, return_lse=return_lse)
            if not return_lse:
                return hook._attend(q, k, v, attention_type=attention_type, text_tokens=0, scale=op_scale)
            # ring: the recipe's kernel with the LSE its epilogue writes (on CUDA), merged by diffusers
            hook._count_engine(q, k, None, attention_type, return_lse=True)
            return attend(q, k, v, hook.ctx.recipe, layout="BNHD", scale=op_scale, rope_segments=hook.segments(q),
                          return_lse=True)

        def backward_op(*args, **kwargs):
            raise inference_only("context-parallel attention under a recipe")

        return _templated_context_parallel_attention(query, key, value, None, 0.0, False, scale, False, False,
                                                     forward_op=forward_op, backward_op=backward_op,
                                                     _parallel_config=parallel_config)

    def _text_slice(self, n_keys: int, text_tokens: int) -> slice:
        return slice(0, text_tokens) if self.text == "before" else slice(n_keys - text_tokens, n_keys)

    def _quantized(self, q, k, v, plan, *, attention_type: str, text_tokens: int, scale) -> torch.Tensor:
        """The recipe's attention of BNHD q, k, v under a key-padding `plan` (None: no mask): per group of batch
        rows with the same valid keys, the valid tokens attend to the valid keys under the recipe and the padded
        rows (whose outputs reach only other padded rows) attend to them in dense 16-bit math, which is what the
        masked kernel gives them. Gathers by the plan's device indices: no host synchronisation."""
        if isinstance(plan, QueryGroupPlan):  # each group of queries against its keys; no key: zeros, as flex
            out = torch.zeros_like(q)
            for rows, keys in plan.groups:
                out[:, rows] = self._attend(q[:, rows], k[:, keys], v[:, keys], attention_type=attention_type,
                                            text_tokens=0, scale=scale)
            return out
        if plan is None or plan.all_valid:
            return self._attend(q, k, v, attention_type=attention_type, text_tokens=text_tokens, scale=scale)
        same_tokens = q.shape[1] == k.shape[1]
        n_keys = k.shape[1]
        whole = len(plan.rows) == 1  # every row alike (one prompt length): no gather over the batch
        out = None if whole else torch.empty_like(q)
        for rows, keep, pad, n_text, kept_video in plan.rows:
            qb, kb, vb = (q, k, v) if whole else (q[rows], k[rows], v[rows])
            kb, vb = kb[:, keep], vb[:, keep]
            if not same_tokens:  # cross-attention: every query against the valid keys
                ob = self._attend(qb, kb, vb, attention_type=attention_type, text_tokens=0, scale=scale)
            else:
                if text_tokens and kept_video != n_keys - text_tokens:
                    raise ShapeError("the attention mask drops video tokens; only text padding is supported")
                ob = torch.empty_like(qb)
                ob[:, keep] = self._attend(qb[:, keep], kb, vb, attention_type=attention_type, text_tokens=n_text,
                                           scale=scale)
                if pad.shape[0]:
                    ob[:, pad] = _bnhd_sdpa(qb[:, pad], kb, vb, scale).to(ob.dtype)
            if whole:
                return ob
            out[rows] = ob
        return out

    def segments(self, q: torch.Tensor) -> tuple[int, ...] | None:
        """The model's RoPE split for a call of q's head size: a family can attend with heads of another size than
        its RoPE's (SANA-WM's camera attention, audio tracks), and those calls take the recipe's default."""
        segs = self.rope_segments
        return segs if segs and sum(segs) == q.shape[-1] else None

    def _attend(self, q, k, v, *, attention_type: str, text_tokens: int, scale=None) -> torch.Tensor:
        ctx = self.ctx
        recipe = ctx.recipe
        if not ctx.dispatch.geometry:
            self._count_engine(q, k, None, attention_type)
            return attend(q, k, v, recipe, layout="BNHD", scale=scale, rope_segments=self.segments(q))
        grid = ctx.grid
        n = q.shape[1]
        if grid is None:
            raise ShapeError(f"{ctx.dispatch.name} recipe: the video token grid of this forward is unknown (the "
                             "transformer's input is not a 5-D latent)")
        if text_tokens and self.text is None:
            raise ShapeError(f"{ctx.dispatch.name} recipe: {n} tokens are the video grid {grid} plus {text_tokens} "
                             f"others, and where text sits in {self.name}'s attention is not in the facts table")
        if grid[0] * grid[1] * grid[2] + text_tokens != n or k.shape[1] != n:
            raise ShapeError(f"{ctx.dispatch.name} recipe: cannot lay out {n} tokens as the video grid {grid} "
                             f"plus {text_tokens} text tokens")
        geometry = VideoGeometry(int(grid[0]), int(grid[1]), int(grid[2]), prefix=int(text_tokens))
        self._count_engine(q, k, geometry, attention_type)
        if not text_tokens or self.text == "before":
            return attend(q, k, v, recipe, layout="BNHD", scale=scale, rope_segments=self.segments(q),
                          geometry=geometry)
        # Text follows the video here; VideoGeometry wants it first.
        front = lambda t: torch.cat([t[:, n - text_tokens:], t[:, : n - text_tokens]], dim=1)
        out = attend(front(q), front(k), front(v), recipe, layout="BNHD", scale=scale,
                     rope_segments=self.segments(q), geometry=geometry)
        return torch.cat([out[:, text_tokens:], out[:, :text_tokens]], dim=1)

    def _count_engine(self, q, k, geometry, attention_type: str, return_lse: bool = False) -> None:
        """Count (and say once) a quantized call on CUDA that `attend` will give the float64 engine: the route
        `attend` takes (`dispatch.route`, asked with the call's BNHD tensors as attend passes them on). Not under
        torch.compile: the dispatch table's device checks are host work dynamo does not trace (the recipe's custom op
        still runs the engine where no kernel takes a call)."""
        if not q.is_cuda or torch.compiler.is_compiling():
            return
        ctx = self.ctx
        route = dispatch.route(ctx.recipe.attention, q.transpose(1, 2), k.transpose(1, 2), geometry=geometry,
                               return_lse=return_lse)
        if route.path != "engine":
            return
        self._count(attention_type, "engine")
        ctx.warn_once("engine", f"{ctx.recipe.name}: no kernel takes these calls ({route.reason}); they run on the "
                      "float64 reference engine on the GPU (exact, slow; counted as 'engine' in the attention calls)")

    # -- captures

    def _capture(self, q, k, v, attn_mask, *, text_tokens: int, quantized: bool) -> None:
        ctx = self.ctx
        cap, tracker = ctx.capture, ctx.tracker
        try:
            valid = key_padding(attn_mask, q.shape[0], k.shape[1])
        except UnsupportedMask:
            valid = None
        text = self._text_slice(k.shape[1], text_tokens)
        for row, (prompt, branch) in enumerate(ctx.row_labels(q.shape[0])):
            if not cap.wants(block=self.block_index, step=tracker.step, num_steps=tracker.num_steps,
                             num_blocks=self.num_blocks, prompt=prompt, branch=branch):
                continue
            qb, kb, vb = q[row:row + 1], k[row:row + 1], v[row:row + 1]
            n_text = text_tokens
            if valid is not None and not bool(valid[row].all()):
                keep = valid[row].nonzero().squeeze(1)
                qb, kb, vb = qb[:, keep], kb[:, keep], vb[:, keep]
                n_text = int(valid[row, text].sum()) if text_tokens else 0
            segs = self.segments(qb)
            info = {
                "attention_type": self.attention_type, "quantized": quantized, "expert": self.expert,
                "grid": list(ctx.grid) if ctx.grid else None, "video_tokens": int(qb.shape[1]) - n_text,
                "text_tokens": n_text, "rope_segments": list(segs) if segs else None,
            }
            cap.save(block=self.block_index, step=tracker.step, num_steps=tracker.num_steps, prompt=prompt,
                     branch=branch, q=qb, k=kb, v=vb, info=info)


def _refusal(query, key, dropout_p, is_causal, enable_gqa, heads_dim: int) -> str | None:
    """Why the quantized path cannot take a call (None: it can); the mask is judged separately. `heads_dim`: 2 for
    diffusers' (B, S, H, D), 1 for SDPA's (B, H, S, D)."""
    if query.dim() != 4 or key.dim() != 4:
        return "not 4-D"
    if is_causal:
        return "a causal mask"
    if dropout_p:
        return "dropout"
    if enable_gqa or query.shape[heads_dim] != key.shape[heads_dim]:
        return "grouped-query heads"
    return None


def _bnhd_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale=None) -> torch.Tensor:
    """Dense attention in the inputs' dtype, BNHD in and out."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale)
    return out.transpose(1, 2)


__all__ = ["DISPATCH_NAME", "DispatchInterposer", "HOOK_ATTRIBUTE", "HOOK_NAME", "RecipeAttentionHook", "enter_module",
           "leave_module"]
