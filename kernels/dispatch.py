"""The kernel dispatch table: which kernel variant runs which recipe, with which settings, and why a recipe is
refused; and the route of each attention call. `supports()`, `route()` (which `attend`, the recipe's custom op and
the model hooks' call counts all ask), `bench kernels` and the CLI help read it.

Each row (`Variant`) says
- which recipes it serves: `serves(spec)`, a match on the recipe's AttentionSpec (its kind and formats), never
  on a recipe name; the first row that matches is the recipe's row, the last one (`reference`) matches
  everything else;
- why its kernel cannot run a recipe it serves (`refuse(spec)`: "" when it can), and the per-call
  constraints (head_dim, GPU generation, input dtype, the video geometry draft recipes need);
- how its kernel is launched: the entry point (`entry`), the operand pre-pass `launch.attention` runs before the
  kernel (`prepass`, a function of kernels/operands.py) and the kernel family's mode (`mode`, kernels/modes.py);
- which settings (`settings`) a caller may change; their measured defaults per variant, head_dim and P̃
  placement are one function, `tuned_defaults` (results/kernels-h200.md);
- how the recipe behaves beside the kernel: `plain_softmax` (unquantized softmax attention: torch SDPA, the
  model's own kernel, runs it), `geometry` (it needs the video token layout: self-attention over every token of
  the video at once, so no cross-attention and no ring context parallelism), `engine` (the exact CPU engine that
  computes it: "reference" or "draft").

Adding a kernel variant: its row here (and its line in `tuned_defaults`), its pre-pass in kernels/operands.py and
its mode in the kernel (kernels/modes.py, kernels/_core.py).

Pure Python: importing it loads neither triton nor the kernels (the CLI reads it on every start).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from typing import Callable, NamedTuple

from lowbit_video.recipes import MX_RULES, AttentionSpec, Recipe, available_recipes, load_recipe

from .modes import MODE_DENSE, MODE_INT4, MODE_MX, MODE_NVFP4, MODE_SAGE

KEY_TILE = 128  # keys per kernel tile = the recipes' tile_k (P̃ is quantized against the same running maximum)
QUERY_GROUP = 128  # the INT4 / NVFP4 query tile = their Q-smoothing group (one q mean per program)
HEAD_DIMS = (64, 128)
FP8_CAPABILITY = (8, 9)  # the 8-bit variants run FP8 MMAs
GLUON_CAPABILITY = (9, 0)  # the Gluon kernel is sm_90 code (wgmma, TMA)


# ------------------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class Setting:
    """A kernel setting a caller may pass (`attention(config=...)`, `bench kernels --config KEY=VALUE`)."""

    name: str
    type: type
    help: str


ATTENTION_SETTINGS = (
    Setting("GLUON", bool, "run the warp-specialized Gluon kernel (kernels/gluon_ws.py; sm_90, 8-bit operands, no key "
            "padding mask; default on for sage2-int8, MXFP4 and INT4); false runs the Triton kernel"),
    Setting("NUM_STAGES", int, "K/V tiles in flight (shared-memory ring), 1..8 (Gluon: >= 2)"),
    Setting("DEFER", bool, "Gluon: release the previous tile's K/V stage just before the next wait (default on; "
            "needs NUM_STAGES >= 3, so off with 2)"),
    Setting("EARLY_QK", bool, "Gluon: issue the next tile's QKᵀ before this tile's softmax (default on, off for "
            "MXFP4 with direct P̃ placement)"),
    Setting("WORK_LOOP", bool, "Gluon: programs loop over their work tiles (default on, off for MXFP4 with direct "
            "P̃ placement)"),
    Setting("CONSUMERS", int, "Gluon: consumer warpgroups per program, 64 query rows each: 2, or 3 (sage2-int8 at "
            "head_dim 64, its default there)"),
    Setting("QK_FP8", bool, "INT4: Q/K codes as E4M3 on the FP8 MMA (default: where the Gluon kernel runs)"),
    Setting("BLOCK_M", int, "Triton: query rows per program, a power of two in 16..256 (INT4/NVFP4: 128)"),
    Setting("num_warps", int, "Triton: warps per program (1, 2, 4, 8, 16)"),
    Setting("PIPE", bool, "Triton: issue the next tile's QKᵀ before this tile's softmax (default on for MXFP4 "
            "and INT4)"),
    Setting("DS", str, "INT4 with Q smoothing: 'table' (ΔS from a pre-pass table, default) or 'fused' (3xTF32 "
            "MMA per key tile; head_dim 64 only)"),
    Setting("PQ", bool, "Triton MXFP4: quantize P̃ in the kernel (default on; off only to measure what it "
            "costs: the output is then not the recipe's)"),
)
DRAFT_SETTINGS = (
    Setting("GLUON", bool, "run the warp-specialized block-sparse Gluon kernel (kernels/draft_ws.py; sm_90, "
            "PROMOTE; default on); off or elsewhere the Triton kernel with the same numerics"),
    Setting("num_warps", int, "Triton: warps per program of the draft kernel (setting it selects the Triton "
            "kernel)"),
    Setting("NUM_STAGES", int, "K/V tiles in flight (Gluon: per consumer warpgroup, 2 fit at head_dim 128)"),
    Setting("PROMOTE", bool, "add each key tile's FP8 P̂·V̂ to the fp32 accumulator (Hopper's FP8 MMA accumulates "
            "with fewer bits)"),
    Setting("prepass_warps", int, "warps per program of the fused draft pre-pass"),
)
SETTINGS = {s.name: s.type for s in ATTENTION_SETTINGS}
DRAFT_KEYS = {s.name: s.type for s in DRAFT_SETTINGS}
# settings only the Triton kernel has: one of them selects it (GLUON off) unless GLUON=true is also given (refused)
TRITON_ONLY = ("BLOCK_M", "num_warps", "PIPE", "PQ")
GLUON_DRAFT_STAGES = {64: 4, 128: 2}  # what fits the Gluon kernel's shared memory (two rings, three Q tiles each)


def settings_help(draft: bool = False) -> str:
    """One line per setting, for `--help` and the README."""
    return "; ".join(f"{s.name} ({s.type.__name__}): {s.help}" for s in (DRAFT_SETTINGS if draft else
                                                                         ATTENTION_SETTINGS))


# ------------------------------------------------------------------------------------------ tuned defaults


def tuned_defaults(variant: str, head_dim: int, placement: str) -> dict:
    """Every measured default setting of a row's kernel, in one function of the variant, the head_dim and the
    recipe's P̃ placement (the shape of flash-attention's hopper/tile_size.h). Measured on the H200
    (results/kernels-h200.md, "Where the time goes" and the draft section; the losing alternatives:
    kernels/README.md).

    BLOCK_M changes no numerics of MXFP4 / sage2 (their scales are per token or per 128-token tile); it is the INT4 /
    NVFP4 Q-smoothing group. PIPE pays off where the per-element work is heavy (MXFP4 and INT4 P̃ quantization).
    GLUON: the warp-specialized kernel where it applies, faster than the Triton kernel for every 8-bit recipe.
    EARLY_QK and WORK_LOOP: faster for sage2-int8, INT4 and the PNQ MXFP4 recipes, slower (3-9 %) for the MXFP4
    recipes that place P̃ directly, so they follow the placement. The attention kernels measured their best at the
    same settings for head_dim 64 and 128 but sage2-int8's CONSUMERS (3 at 64, where the registers allow); the
    draft Gluon kernel's K/V stages are as many as fit its shared memory at the head_dim (`GLUON_DRAFT_STAGES`;
    the Triton draft kernel, where a caller selects it, runs `DRAFT_TRITON_STAGES`)."""
    pnq = placement == "pnq"
    if variant == "dense":
        return dict(BLOCK_M=128, num_warps=8, NUM_STAGES=3, PIPE=False)
    if variant == "mx":
        return dict(BLOCK_M=128, num_warps=8, NUM_STAGES=4, PIPE=True, GLUON=True, DEFER=True, EARLY_QK=pnq,
                    WORK_LOOP=pnq)
    if variant == "sage":
        d64 = head_dim == 64  # a third consumer warpgroup fits there, and pays
        return dict(BLOCK_M=64, num_warps=4, NUM_STAGES=3, PIPE=False, GLUON=True, DEFER=True,
                    EARLY_QK=True, WORK_LOOP=True, CONSUMERS=3 if d64 else 2)
    if variant == "int4":
        # QK_FP8 None: E4M3 codes where the Gluon kernel runs (the Triton kernel measured 5 % slower with them)
        return dict(BLOCK_M=QUERY_GROUP, num_warps=8, NUM_STAGES=3, DS="table", PIPE=True, QK_FP8=None, GLUON=True,
                    DEFER=True, EARLY_QK=True, WORK_LOOP=True)
    if variant == "nvfp4":
        return dict(BLOCK_M=QUERY_GROUP, num_warps=8, NUM_STAGES=3, PIPE=False)  # PIPE: out of shared memory
    if variant == "draft":
        return dict(GLUON=True, num_warps=4, NUM_STAGES=GLUON_DRAFT_STAGES.get(head_dim, 2), PROMOTE=True,
                    prepass_warps=4)
    raise ValueError(f"variant {variant!r} has no kernel settings")


DRAFT_TRITON_STAGES = 3  # the Triton draft kernel's K/V stages (see `tuned_defaults`)


# ------------------------------------------------------------------------------------------- the rows


def _formats(spec: AttentionSpec) -> list[str]:
    return [spec.operand(n).format for n in ("q", "k", "v", "p")]


def _refuse_mx(spec) -> str:
    ops = [spec.operand(n) for n in ("q", "k", "v", "p")]
    if any(o.granularity != "block" or o.block_size != 32 for o in ops):
        return "MXFP4 kernel needs 32-element blocks"
    if any(o.rule not in MX_RULES for o in ops):
        return "unknown MX rule"
    if any(o.rule == "uos" and not (4.0 <= o.qmax < 8.0) for o in ops):
        return "UOS boundary outside [4, 8)"
    if spec.rotation not in ("none", "hadamard") or spec.rotate_v or spec.smooth_k or spec.smooth_q:
        return "MXFP4 kernel supports rotation none/hadamard, no smoothing, no V rotation"
    if spec.tile_k != KEY_TILE:
        return f"kernel key tile is {KEY_TILE}, recipe tile_k {spec.tile_k}"
    return ""


def _refuse_sage(spec) -> str:
    q, k, v, p = (spec.operand(n) for n in ("q", "k", "v", "p"))
    ok = (q.granularity == "per_token" and k.granularity == "per_thread" and k.group == KEY_TILE
          and q.scheme == "symmetric"
          and k.scheme == "symmetric" and v.granularity == "per_channel" and not v.static_scale
          and p.granularity == "per_row" and p.static_scale > 0 and spec.placement == "direct"
          and spec.rotation == "none" and not spec.rotate_v and not spec.smooth_q and spec.tile_k == KEY_TILE)
    return "" if ok else ("only the sage2-int8 layout of INT8/FP8 is implemented (Q per token, K in per-thread "
                          f"groups of {KEY_TILE}-key blocks, V per channel, P̃ static)")


def _refuse_int4(spec) -> str:
    q, k, v, p = (spec.operand(n) for n in ("q", "k", "v", "p"))
    if not (q.granularity == "per_token" and k.granularity == "per_token" and q.scheme == "symmetric"
            and k.scheme == "symmetric"):
        return "INT4 kernel: Q/K per token, symmetric"
    if not (v.granularity == "per_channel" and v.scheme == "symmetric"):
        return "INT4 kernel: V per channel, symmetric"
    if not (p.granularity == "per_row" and p.scheme in ("affine", "symmetric")):
        return "INT4 kernel: P̃ per row (affine or symmetric)"
    if spec.rotation not in ("none", "interleaved", "half", "hadamard"):
        return f"INT4 kernel: unknown rotation {spec.rotation!r}"
    if spec.rotation_sigma != 1.0:
        return "INT4 kernel: orthogonal rotations only (rotation_sigma = 1; the reference engine runs the control)"
    return _refuse_tiles(spec, "INT4")


def _refuse_nvfp4(spec) -> str:
    q, k, v, p = (spec.operand(n) for n in ("q", "k", "v", "p"))
    if any(o.outer_scale not in ("tensor", "none") for o in (q, k, v)) or p.outer_scale not in ("none", "row"):
        return "NVFP4 kernel: Q/K/V outer scale tensor or none, P̃ none or row"
    if spec.rotation != "none" or spec.rotate_v:
        return "NVFP4 kernel: no rotation"
    return _refuse_tiles(spec, "NVFP4")


def _refuse_tiles(spec, kernel: str) -> str:
    """The INT4 and NVFP4 kernels' tiles: Q smoothed per query tile, KEY_TILE keys, P̃ placed directly or PNQ."""
    if spec.smooth_q and spec.smooth_q_group != QUERY_GROUP:
        return f"{kernel} kernel: Q smoothing groups of {QUERY_GROUP} tokens (the query tile)"
    if spec.placement not in ("direct", "pnq") or spec.tile_k != KEY_TILE:
        return f"{kernel} kernel: key tile {KEY_TILE}, direct or pnq placement"
    return ""


def _refuse_draft(spec) -> str:
    return "" if spec.draft.block == 64 else f"draft kernel: 64-token region blocks (recipe block {spec.draft.block})"


def _no_kernel(spec) -> str:
    if spec.kind != "quantized":
        return f"kind {spec.kind!r} has no kernel"
    return f"formats {_formats(spec)} have no kernel; the reference engine runs them"


@dataclass(frozen=True)
class Variant:
    name: str
    description: str  # which recipes, in words (for --help and the README)
    serves: Callable[[AttentionSpec], bool]
    refuse: Callable[[AttentionSpec], str]
    entry: str | None = "launch:attention"  # module:function of the kernel call (module under lowbit_video.kernels);
    #                                         None: no kernel (the engine runs the row's recipes)
    prepass: str | None = None  # module:function of the operand pre-pass `launch.attention` runs (kernels/operands.py);
    #                             None: the kernel reads q, k and v as they are
    mode: int | None = None  # the kernel family's MODE for this row (kernels/modes.py)
    settings: tuple[str, ...] = ()
    capability: tuple[int, int] = FP8_CAPABILITY  # the oldest GPU it runs on: the 8-bit ones need FP8 MMAs
    dtypes: tuple[str, ...] = ()  # the input dtypes the kernel takes; () = any floating type
    plain_softmax: bool = False
    geometry: bool = False
    engine: str = "reference"
    gluon: bool = False  # the Gluon kernel (kernels/gluon_ws.py) has a mode for it (setting GLUON)
    block_m: int | None = None  # the query tile the variant needs (its Q-smoothing group), if any
    smooths_k: bool = False  # its pre-pass subtracts K's mean whatever the recipe says (sage2's), so the LSE adds it
    replay: bool = False  # its pre-pass and kernel are kernel launches only and rewrite every buffer they read on each
    #                       call, so a call plan may replay them (kernels/plans.py)

    @property
    def has_kernel(self) -> bool:
        return self.entry is not None


_ATTN = tuple(s.name for s in ATTENTION_SETTINGS)
VARIANTS = (
    Variant("dense", "unquantized attention (fp16): the 16-bit kernel; attend runs torch SDPA instead",
            lambda s: s.kind == "dense", lambda s: "", mode=MODE_DENSE, settings=_ATTN, capability=(0, 0),
            dtypes=("float16", "bfloat16"), plain_softmax=True),
    Variant("mx", "MXFP4 everywhere (mxattention and its ablations, mxfp4-ocp, mxfp4-tfs): Q/K folded into E4M3, "
            "P̃ quantized in the kernel", lambda s: s.kind == "quantized" and _formats(s) == ["mxfp4"] * 4,
            _refuse_mx, prepass="operands:mx_operands", mode=MODE_MX, settings=_ATTN, gluon=True, replay=True),
    Variant("sage", "INT8 Q/K, FP8 V and P̃ (sage2-int8)",
            lambda s: s.kind == "quantized" and _formats(s) == ["int8", "int8", "fp8_e4m3", "fp8_e4m3"],
            _refuse_sage, prepass="operands:sage_operands", mode=MODE_SAGE, settings=_ATTN, gluon=True,
            smooths_k=True, replay=True),
    Variant("int4", "INT4 everywhere (rotateattention-*, int4-baseline): integer codes on exact MMAs",
            lambda s: s.kind == "quantized" and _formats(s) == ["int4"] * 4, _refuse_int4,
            prepass="operands:int4_operands", mode=MODE_INT4, settings=_ATTN, gluon=True, block_m=QUERY_GROUP,
            replay=True),
    Variant("nvfp4", "NVFP4 everywhere (nvfp4, sage-nvfp4): exact 16-bit MMAs on E2M1·E4M3 values",
            lambda s: s.kind == "quantized" and _formats(s) == ["nvfp4"] * 4, _refuse_nvfp4,
            prepass="operands:nvfp4_operands", mode=MODE_NVFP4, settings=_ATTN, block_m=QUERY_GROUP),
    Variant("draft", "DraftAttention2 (kind draft): block-sparse, mixed 16/8/4-bit, 64-token region blocks",
            lambda s: s.kind == "draft", _refuse_draft, entry="draft:draft_attention", settings=tuple(DRAFT_KEYS),
            dtypes=("float16", "bfloat16"), geometry=True, engine="draft"),
    Variant("reference", "any other recipe: no kernel, the reference engine", lambda s: True, _no_kernel, entry=None),
)
BY_NAME = {v.name: v for v in VARIANTS}


@functools.lru_cache(maxsize=256)
def variant_of(spec: AttentionSpec) -> Variant:
    """The row that serves `spec` (the catch-all `reference` row when no kernel does). Cached by spec (a frozen
    dataclass): `attend` asks several times per call, and matching the formats costs ~10 µs of host time."""
    return next(v for v in VARIANTS if v.serves(spec))


@functools.lru_cache(maxsize=256)
def refusal(spec: AttentionSpec) -> str:
    """Why the kernel of `spec`'s row cannot run it ("" when it can), cached as `variant_of`."""
    return variant_of(spec).refuse(spec)


# ------------------------------------------------------------------------------------------ recipes


def attention_spec(recipe) -> AttentionSpec:
    """The AttentionSpec of a recipe given as an AttentionSpec, a Recipe, a name or a path. Names and paths are read
    once per process (per LOWBIT_VIDEO_RECIPES value), so a call path that names its recipe parses no TOML and scans
    no recipe folder after the first call."""
    if isinstance(recipe, AttentionSpec):
        return recipe
    return load_cached(recipe).attention


def load_cached(recipe) -> Recipe:
    """`load_recipe`, cached by name or path (see `attention_spec`)."""
    if isinstance(recipe, Recipe):
        return recipe
    return _load(os.fspath(recipe), os.environ.get("LOWBIT_VIDEO_RECIPES", ""))


@functools.lru_cache(maxsize=128)
def _load(text: str, recipe_dirs: str) -> Recipe:
    return load_recipe(text)  # a RecipeError propagates and is not cached


def kernel_recipes(kind: str | None = None) -> tuple[str, ...]:
    """The names of the available recipes a kernel runs (`kind` "draft": only the draft ones; "attention": all but
    those), in table order: the default recipe lists of `bench kernels` and `bench draft`."""
    rows = {v.name: i for i, v in enumerate(VARIANTS)}
    found = []
    for name in available_recipes():
        spec = attention_spec(name)
        row = variant_of(spec)
        if not row.has_kernel or row.refuse(spec):
            continue
        if kind == "draft" and row.name != "draft" or kind == "attention" and row.name == "draft":
            continue
        found.append((rows[row.name], name))
    return tuple(name for _, name in sorted(found))


# --------------------------------------------------------------------------------------- constraints


@functools.lru_cache(maxsize=16)
def _capability(index: int) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(index)


def capability(device) -> tuple[int, int]:
    """The compute capability of a CUDA device (cached: it does not change)."""
    import torch

    device = torch.device(device)
    return _capability(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=1)
def _triton_installed() -> bool:
    # looked up once: `find_spec` searches sys.path, 20–100 µs of host time on every call otherwise
    return importlib.util.find_spec("triton") is not None


def supports(spec: AttentionSpec, device=None, head_dim: int | None = None) -> tuple[bool, str]:
    """(ok, reason): whether a kernel runs `spec` on `device` (None: any CUDA GPU) with `head_dim` (None: any)."""
    row = variant_of(spec)
    why = refusal(spec)
    if why:
        return False, why
    if not _triton_installed():
        return False, "triton is not installed"
    if device is not None:
        import torch

        if torch.device(device).type != "cuda":
            return False, "kernels run on CUDA devices only"
        if capability(device) < row.capability:
            return False, "FP8 kernels need sm_89 or newer"
    if head_dim is not None and head_dim not in HEAD_DIMS:
        return False, f"head_dim {head_dim} (kernels: {', '.join(map(str, HEAD_DIMS))})"
    return True, ""


def refuse_call(row: Variant, q, k, geometry=None) -> str:
    """Why the kernel of `row` cannot take these BHND tensors ("" when it can): their dtype, and the video
    geometry a draft recipe is laid out by (present, and every query and key token in it)."""
    if row.dtypes and str(q.dtype).removeprefix("torch.") not in row.dtypes:
        return f"the {row.name} kernel takes {' or '.join(row.dtypes)} tensors, got {q.dtype}"
    if row.geometry and (geometry is None or not q.shape[-2] == geometry.tokens == k.shape[-2]):
        return "the draft kernel needs the video geometry of every query and key token"
    return ""


def kernel_refusal(spec: AttentionSpec, q, k, geometry=None) -> str:
    """Why the kernel of `spec`'s row cannot take this call of BHND tensors ("" when it can): CUDA tensors, a row
    with a kernel supported on this device and head_dim, and the call's own constraints (`refuse_call`)."""
    if not q.is_cuda:
        return "kernels run on CUDA devices only"
    ok, why = supports(spec, q.device, q.shape[-1])
    return why if not ok else refuse_call(variant_of(spec), q, k, geometry)


class Route(NamedTuple):
    """How one attention call runs, as `route` decided it.

    path: "kernel" (the row's kernel, `run_kernel`), "sdpa" (torch SDPA: the plain-softmax row), "cpu" (the float32
        CPU path of the row's engine) or "engine" (the float64 engine, `row.engine`); "" while torch.compile traces
        a call of the custom op, which asks again when it runs (the device checks are host work dynamo does not
        trace).
    reason: why no kernel takes the call ("" on the kernel and SDPA paths).
    op: the call goes through the recipe's custom op (attention/custom_op.py: one opaque node under torch.compile):
        `attend`'s calls without diagnostics or LSE of a recipe that is not plain softmax, on backend "auto"."""

    path: str
    row: Variant
    reason: str = ""
    op: bool = False


def route(spec: AttentionSpec, q, k, *, backend: str = "auto", geometry=None, return_lse: bool = False,
          return_diagnostics: bool = False, autograd: bool = False) -> Route:
    """The route of one `attend` call of BHND q, k (attention/api.py documents the rules): a forced backend or
    diagnostics -> the CPU path or the engine; backend "auto" -> the row's kernel where one takes the call (with
    return_lse the plain-softmax row's 16-bit kernel too: torch SDPA returns no LSE), else torch SDPA for plain
    softmax, else the CPU path for CPU tensors and the engine on a GPU. autograd: autograd records the call; only
    torch SDPA has gradients, so a plain-softmax call stays there (`attend` refuses any other such call). The
    custom op and the model hooks' call counts ask the same function."""
    import torch

    tracing = torch.compiler.is_compiling()
    # the row, cached per spec; traced afresh under torch.compile (dynamo does not honour lru caches, and warns)
    row = (variant_of.__wrapped__ if tracing else variant_of)(spec)
    if backend == "cpu" and not return_diagnostics:
        return Route("cpu", row, "backend 'cpu'")
    if backend != "auto" or return_diagnostics:
        return Route("engine", row, "return_diagnostics" if return_diagnostics else f"backend {backend!r}")
    if return_lse:  # ring attention's call: the kernel with the LSE its epilogue writes
        why = "autograd records the call" if autograd else kernel_refusal(spec, q, k, geometry)
        if not why:
            return Route("kernel", row)
        if row.plain_softmax:
            return Route("sdpa", row)
        return Route("engine" if q.is_cuda else "cpu", row, why)
    if row.plain_softmax:
        return Route("sdpa", row)
    if tracing:
        return Route("", row, op=True)
    why = kernel_refusal(spec, q, k, geometry)
    return Route(("engine" if q.is_cuda else "cpu") if why else "kernel", row, why, op=True)


@functools.lru_cache(maxsize=32)
def entry_function(entry: str):
    """The function a row's entry or pre-pass ("module:function" in this package) names, imported once."""
    module, function = entry.split(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


def run_kernel(spec: AttentionSpec, q, k, v, *, scale=None, rope_segments=None, geometry=None,
               return_lse: bool = False):
    """The row's kernel on BHND tensors (the caller's route said "kernel"); with return_lse (out, lse), lse fp32
    (B, H, Nq) written by the kernel's epilogue (every kernel writes it)."""
    row = variant_of(spec)
    fn = entry_function(row.entry)
    extra = {"geometry": geometry} if row.geometry else {"rope_segments": rope_segments}
    if return_lse:
        extra["return_lse"] = True
    return fn(q, k, v, spec, layout="BHND", scale=scale, **extra)


# ------------------------------------------------------------------------------------------ settings


def with_overrides(defaults: dict, config: dict | None, types: dict, what: str) -> dict:
    """`defaults` updated by `config`, each key known to `types` and of exactly that type (a bool is no int)."""
    cfg = dict(defaults)
    for key, val in (config or {}).items():
        typ = types.get(key)
        if typ is None:
            raise ValueError(f"unknown {what} key {key!r}; known: {', '.join(types)}")
        if type(val) is not typ:
            raise ValueError(f"{what} {key} must be {typ.__name__}, got {val!r}")
        cfg[key] = val
    return cfg


def _knob_needs(cfg: dict, asked: dict, key: str, possible, message: str) -> None:
    """A boolean setting that only works where `possible` holds: a default gives way (turned off), one the caller
    asked for is refused with `message`."""
    if cfg.get(key) and not possible:
        if asked.get(key):
            raise ValueError(message)
        cfg[key] = False


def merged_config(variant: str, head_dim: int, config: dict | None, placement: str = "pnq") -> dict:
    """The variant's measured defaults with the caller's overrides, checked (unknown keys, wrong types, values out
    of range, settings that cannot act together), so a misspelt setting cannot be silently ignored.
    placement: the recipe's P̃ placement, which the MXFP4 defaults depend on. Without overrides (every call
    `attend` makes) the checked defaults are made once (a copy is returned)."""
    if not config:
        return dict(_checked_defaults(variant, head_dim, placement))
    return _merged(variant, head_dim, config, placement)


@functools.lru_cache(maxsize=64)
def _checked_defaults(variant: str, head_dim: int, placement: str) -> dict:
    return _merged(variant, head_dim, None, placement)


def _merged(variant: str, head_dim: int, config: dict | None, placement: str) -> dict:
    row = BY_NAME[variant]
    if row.entry != "launch:attention":
        raise ValueError(f"no attention-kernel configuration for variant {variant!r}")
    defaults = tuned_defaults(variant, head_dim, placement)
    cfg = with_overrides(defaults, config, SETTINGS, "kernel config")
    asked = config or {}
    triton_keys = [key for key in asked if key in TRITON_ONLY]
    if triton_keys and cfg.get("GLUON"):
        if asked.get("GLUON"):
            raise ValueError(f"kernel config {', '.join(triton_keys)} tune(s) the Triton kernel, not GLUON's; "
                             "drop GLUON=true")
        cfg["GLUON"] = False  # a Triton setting asks for the Triton kernel
    if row.block_m is not None and cfg["BLOCK_M"] != row.block_m:
        raise ValueError(f"the {variant.upper()} variant needs BLOCK_M = {row.block_m} (its Q smoothing group)")
    if cfg["BLOCK_M"] not in (16, 32, 64, 128, 256):
        raise ValueError(f"kernel config BLOCK_M must be a power of two in 16..256, got {cfg['BLOCK_M']}")
    if cfg["num_warps"] not in (1, 2, 4, 8, 16):
        raise ValueError(f"kernel config num_warps must be 1, 2, 4, 8 or 16, got {cfg['num_warps']}")
    if not 1 <= cfg["NUM_STAGES"] <= 8:
        raise ValueError(f"kernel config NUM_STAGES must be in 1..8, got {cfg['NUM_STAGES']}")
    if cfg.get("GLUON") and not row.gluon:
        raise ValueError("kernel config GLUON (the warp-specialized Gluon kernel) exists for sage2-int8, the "
                         "MXFP4 and the INT4 recipes only")
    if cfg.get("GLUON") and "DS" in defaults and cfg["DS"] != "table":
        # the Gluon kernel's INT4 mode reads the ΔS table; DS=fused is a Triton-kernel path
        if asked.get("GLUON"):
            raise ValueError("kernel config GLUON with the INT4 recipes reads the ΔS table: DS must be \"table\"")
        cfg["GLUON"] = False
    # its next tile's QKᵀ is issued while this tile's stage is in use: one stage would wait on itself
    _knob_needs(cfg, asked, "GLUON", cfg["NUM_STAGES"] >= 2, "kernel config GLUON needs NUM_STAGES >= 2")
    # the deferred stage release: with two stages the loader could not run a tile ahead
    _knob_needs(cfg, asked, "DEFER", cfg.get("GLUON") and cfg["NUM_STAGES"] >= 3,
                "kernel config DEFER (the Gluon kernel's deferred stage release) needs GLUON and NUM_STAGES >= 3")
    _knob_needs(cfg, asked, "EARLY_QK", cfg.get("GLUON"),
                "kernel config EARLY_QK (the Gluon kernel's early QKᵀ issue) needs GLUON")
    _knob_needs(cfg, asked, "WORK_LOOP", cfg.get("GLUON"),
                "kernel config WORK_LOOP (the Gluon programs' loop over work tiles) needs GLUON")
    if cfg.get("CONSUMERS", 2) not in (2, 3):
        raise ValueError(f"kernel config CONSUMERS must be 2 or 3, got {cfg['CONSUMERS']}")
    # three consumers' registers spill at head_dim 128 (and the MXFP4 kernels lost with them at 64: kernels/README.md)
    if cfg.get("CONSUMERS", 2) == 3 and not (cfg.get("GLUON") and head_dim == 64 and variant == "sage"):
        if asked.get("CONSUMERS") == 3:
            raise ValueError("kernel config CONSUMERS=3 needs GLUON, head_dim 64 and sage2-int8")
        cfg["CONSUMERS"] = 2
    _knob_needs(cfg, asked, "QK_FP8", "QK_FP8" in defaults,
                "kernel config QK_FP8 (INT4 codes of Q and K as E4M3) exists for the INT4 recipes only")
    return cfg


def gluon_runs(cfg: dict, has_kpm: bool, promote: bool, device) -> bool:
    """Whether the Gluon kernel runs (given 8-bit operands): config GLUON, without a key padding mask, promoted, on
    a Hopper GPU (its wgmma/TMA code is sm_90's; the CPU interpreter does not run Gluon); otherwise the Triton kernel
    (same numerics) runs."""
    if not cfg.get("GLUON") or has_kpm or not promote or device.type != "cuda":
        return False
    return capability(device) == GLUON_CAPABILITY


def draft_config(config: dict | None, head_dim: int) -> dict:
    """The draft kernel's defaults with the caller's overrides, checked. A Triton-only setting (num_warps) or
    PROMOTE off selects the Triton kernel unless GLUON=true is also given (refused); the stage count defaults to
    the kernel's that runs: what fits the Gluon kernel's shared memory, or the Triton kernel's measured one."""
    cfg = with_overrides(tuned_defaults("draft", head_dim, ""), config, DRAFT_KEYS, "draft kernel config")
    asked = config or {}
    triton_only = [key for key in ("num_warps",) if key in asked] + (["PROMOTE=false"] if not cfg["PROMOTE"] else [])
    if triton_only and cfg["GLUON"]:
        if asked.get("GLUON"):
            raise ValueError(f"draft kernel config {', '.join(triton_only)} is the Triton kernel's; drop GLUON=true")
        cfg["GLUON"] = False
    limit = GLUON_DRAFT_STAGES.get(head_dim, 2)
    if not cfg["GLUON"]:
        if "NUM_STAGES" not in asked:
            cfg["NUM_STAGES"] = DRAFT_TRITON_STAGES
    elif not 2 <= cfg["NUM_STAGES"] <= limit:
        raise ValueError(f"draft kernel config NUM_STAGES: the Gluon kernel takes 2..{limit} at head_dim "
                         f"{head_dim}, got {cfg['NUM_STAGES']}")
    return cfg


__all__ = ["ATTENTION_SETTINGS", "DRAFT_SETTINGS", "KEY_TILE", "QUERY_GROUP", "SETTINGS", "VARIANTS", "Route",
           "Variant", "attention_spec", "draft_config", "entry_function", "gluon_runs", "kernel_recipes",
           "kernel_refusal", "load_cached", "merged_config", "refusal", "refuse_call", "route", "run_kernel",
           "settings_help", "supports", "tuned_defaults", "variant_of"]
