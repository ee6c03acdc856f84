"""Recipes are data: TOML files under recipes/, loaded into frozen, validated objects.

A recipe says what attention does numerically (rotation, smoothing, a quantizer per operand, where
the softmax tile is quantized) and which parts of a model keep 16-bit attention (its precision
policy). Files may `include` a base file (path relative to the including file); tables are merged
key by key, the including file winning. Unknown keys and bad values are one-line errors that name
the file and the key.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from .errors import RecipeError

FORMATS = ("none", "mxfp4", "nvfp4", "int8", "int4", "fp8_e4m3")
MX_RULES = ("ocp", "tfs", "uos")
OPERANDS = ("q", "k", "v", "p")
# Block axes are fixed (as the MXAttention paper's implementation): Q and K along head_dim, V along
# tokens per channel (the reduction axis of P·V), P̃ along keys per row. `granularity` picks the
# group sharing one scale on that axis.
GRANULARITIES = {
    "q": ("block", "per_token", "per_token_group"),
    "k": ("block", "per_token", "per_token_group"),
    "v": ("block", "per_channel"),
    "p": ("block", "per_row"),
}
DEFAULT_BLOCK = {"mxfp4": 32, "nvfp4": 16}


@dataclass(frozen=True)
class OperandQuant:
    """How one attention operand (Q, K, V or the unnormalized softmax tile P̃) is quantized."""

    format: str = "none"
    granularity: str = "block"
    block: int = 0  # elements per block along the operand's axis; 0 = the format's default
    group: int = 128  # tokens per group for per_token_group (SageAttention's per-block Q/K scales)
    rule: str = "uos"  # MXFP4 shared-scale rule
    qmax: float = 7.25  # UOS clipping boundary
    scheme: str = "symmetric"  # integer formats: symmetric or affine (scale, zero point)
    outer_scale: str = "tensor"  # NVFP4 second-level FP32 scale: tensor, row (two-level P̃), none
    static_scale: float = 0.0  # FP8: fixed scale instead of amax/448 (e.g. 1/448 for P̃ in [0, 1])

    @property
    def enabled(self) -> bool:
        return self.format != "none"

    @property
    def block_size(self) -> int:
        return self.block or DEFAULT_BLOCK.get(self.format, 32)


class DraftSpecError(ValueError):
    """A DraftSpec value out of range; `key` names the field (the loader adds file and table)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


@dataclass(frozen=True)
class DraftSpec:
    """DraftAttention2's routing budget (`kind = "draft"`, table [attention.draft]).

    Per head, `sparsity` of the video region pairs are skipped; the retained ones split between
    16-bit, 8-bit (INT8 QKᵀ, FP8 P̃·V) and 4-bit (NVFP4) as fp16 : int8 : nvfp4 (shares summing
    to one), highest draft scores at the highest precision. The defaults are dense 16-bit attention.
    """

    block: int = 64  # tokens per packed region block: 64 or 128
    maxpool_weight: float = 0.0  # weight of the max-pooled draft map; 0 = mean pooling only
    sparsity: float = 0.0  # skipped fraction of the video region pairs, in [0, 1)
    fp16: float = 1.0  # share of the retained pairs at 16 bit
    int8: float = 0.0  # share at 8 bit
    nvfp4: float = 0.0  # share at 4 bit

    def __post_init__(self):
        finite = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf")
        if type(self.block) is not int or self.block not in (64, 128):
            raise DraftSpecError("block", f"must be 64 or 128, got {self.block!r}")
        if not (finite(self.maxpool_weight) and 0.0 <= self.maxpool_weight <= 1.0):
            raise DraftSpecError("maxpool_weight", f"must be in [0, 1], got {self.maxpool_weight!r}")
        if not (finite(self.sparsity) and 0.0 <= self.sparsity < 1.0):
            raise DraftSpecError("sparsity", f"must be in [0, 1), got {self.sparsity!r}")
        for name in ("fp16", "int8", "nvfp4"):
            if not (finite(getattr(self, name)) and getattr(self, name) >= 0.0):
                raise DraftSpecError(name, f"must be a finite share >= 0, got {getattr(self, name)!r}")
        total = self.fp16 + self.int8 + self.nvfp4
        if abs(total - 1.0) > 1e-9:
            raise DraftSpecError("fp16", f"the retained shares fp16 + int8 + nvfp4 must sum to 1, got {total!r}")


@dataclass(frozen=True)
class AttentionSpec:
    """What a recipe asks of attention. `kind = "dense"` is plain softmax attention."""

    kind: str = "dense"
    # Orthogonal rotation of Q and K (QKᵀ unchanged in exact arithmetic): none | hadamard (full D×D)
    # | interleaved (2×2 on channel pairs (2i, 2i+1)) | half (within each RoPE segment, i with i + D_j/2).
    rotation: str = "none"
    rope_segments: tuple[int, ...] = ()  # t/h/w RoPE segment sizes; () = the model's (Wan: 44/42/42 at D=128)
    rotate_v: bool = False  # Hadamard on V, its inverse applied to the output (folded into W_o in a model)
    smooth_k: bool = False  # subtract K's per-channel mean over tokens (softmax-invariant)
    smooth_q: bool = False  # subtract Q's per-group mean; the removed part is added back in full precision
    smooth_q_group: int = 128
    placement: str = "pnq"  # pnq: ℓ and Õ from the same quantized P̂; direct: ℓ from P̃, Õ from P̂
    tile_k: int = 128  # keys per online-softmax tile (a multiple of the P̃ block)
    q: OperandQuant = field(default_factory=OperandQuant)
    k: OperandQuant = field(default_factory=OperandQuant)
    v: OperandQuant = field(default_factory=OperandQuant)
    p: OperandQuant = field(default_factory=OperandQuant)
    draft: DraftSpec | None = None  # kind = "draft" only: DraftAttention2's routing budget

    def operand(self, name: str) -> OperandQuant:
        return getattr(self, name)

    @property
    def quantized(self) -> bool:
        return any(self.operand(o).enabled for o in OPERANDS)

    @property
    def head_dim_multiple(self) -> int:
        """head_dim must be a multiple of this (the block size of block-quantized Q/K)."""
        need = 1
        for name in ("q", "k"):
            op = self.operand(name)
            if op.enabled and op.granularity == "block":
                need = max(need, op.block_size)
        return need


@dataclass(frozen=True)
class PrecisionPolicy:
    """Which attention calls of a model keep 16-bit precision (used by the model adapters)."""

    apply_to: tuple[str, ...] = ("self",)  # attention types that are quantized: self, cross
    high_precision_blocks: tuple[int, ...] = ()  # transformer block indices kept at 16 bit; negative = from the end
    high_precision_steps: tuple[int, ...] = ()  # denoising steps kept at 16 bit; negative = from the end

    def quantizes(self, *, block: int, step: int, num_steps: int, num_blocks: int, attention_type: str = "self") -> bool:
        if attention_type not in self.apply_to:
            return False
        blocks = {b if b >= 0 else num_blocks + b for b in self.high_precision_blocks}
        steps = {s if s >= 0 else num_steps + s for s in self.high_precision_steps}
        return block not in blocks and step not in steps


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    attention: AttentionSpec
    policy: PrecisionPolicy
    source: str = ""
    paper: str = ""

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


# ----------------------------------------------------------------------------------------- loading


def recipe_dirs() -> list[Path]:
    """Where recipe names are looked up: $LOWBIT_VIDEO_RECIPES (os.pathsep-separated), then the
    project's recipes/ folder."""
    dirs = [Path(p) for p in os.environ.get("LOWBIT_VIDEO_RECIPES", "").split(os.pathsep) if p]
    dirs.append(Path(__file__).resolve().parent.parent / "recipes")
    return dirs


def available_recipes() -> dict[str, Path]:
    """Recipe name -> file, for every top-level *.toml in the recipe folders (bases live in base/)."""
    found: dict[str, Path] = {}
    for d in recipe_dirs():
        if d.is_dir():
            for path in sorted(d.glob("*.toml")):
                found.setdefault(path.stem, path)
    return found


def load_recipe(name_or_path: str | os.PathLike | Recipe) -> Recipe:
    """A recipe by name (e.g. "mxattention") or by path to a TOML file."""
    if isinstance(name_or_path, Recipe):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".toml") or path.exists():
        if not path.is_file():
            raise RecipeError(f"{text}: no such recipe file")
        return recipe_from_file(path)
    known = available_recipes()
    if text not in known:
        raise RecipeError(f"unknown recipe {text!r}; known recipes: {', '.join(sorted(known))}")
    return recipe_from_file(known[text])


def recipe_from_file(path: Path) -> Recipe:
    data = read_with_includes(Path(path), seen=())
    return recipe_from_dict(data, source=str(path), default_name=Path(path).stem)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{path}: not valid TOML: {e}") from None
    except OSError as e:
        raise RecipeError(f"{path}: cannot read: {e.strerror}") from None


def read_with_includes(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A TOML file with its `include` chain merged (the included file first, this one over it); shared
    by recipe and study files. `seen` guards against include cycles."""
    resolved = path.resolve()
    if resolved in seen:
        raise RecipeError(f"{path}: include cycle ({' -> '.join(str(p) for p in seen + (resolved,))})")
    data = _read_toml(path)
    include = data.pop("include", None)
    if include is None:
        return data
    if not isinstance(include, str):
        raise RecipeError(f"{path}: include: expected a file path string")
    base_path = path.parent / include
    if not base_path.is_file():
        raise RecipeError(f"{path}: include: no such file {base_path}")
    base = read_with_includes(base_path, seen + (resolved,))
    return _deep_merge(base, data)


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# -------------------------------------------------------------------------------------- validation


def recipe_from_dict(data: Mapping[str, Any], *, source: str = "<dict>", default_name: str = "") -> Recipe:
    """Build and validate a Recipe; every problem is a RecipeError naming `source` and the key."""
    where = Where(source)
    top = where.table(data, "", {"name", "description", "paper", "attention", "policy", "include"})
    name = where.scalar(top, "name", str, default_name)
    if not name:
        raise where.error("name", "must be a non-empty string")
    attention = _attention_from_dict(where, top.get("attention", {}))
    policy = _policy_from_dict(where, top.get("policy", {}))
    return Recipe(
        name=name,
        description=where.scalar(top, "description", str, ""),
        paper=where.scalar(top, "paper", str, ""),
        attention=attention,
        policy=policy,
        source=source,
    )


class Where:
    """Validation helper that knows which file it reads, so errors name the file and key."""

    def __init__(self, source: str):
        self.source = source

    def error(self, key: str, message: str) -> RecipeError:
        return RecipeError(f"{self.source}: {key}: {message}")

    def table(self, value: Any, prefix: str, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(prefix or "<top>", "expected a table")
        for key in value:
            if key not in allowed:
                raise self.error(f"{prefix}{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return value

    def scalar(self, table: Mapping[str, Any], key: str, kind: type, default: Any, prefix: str = "") -> Any:
        if key not in table:
            return default
        value = table[key]
        ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise self.error(f"{prefix}{key}", f"expected {kind.__name__}, got {value!r}")
        return value

    def choice(self, table: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str, prefix: str = "") -> str:
        value = self.scalar(table, key, str, default, prefix)
        if value not in choices:
            raise self.error(f"{prefix}{key}", f"{value!r} is not one of {', '.join(choices)}")
        return value

    def int_list(self, table: Mapping[str, Any], key: str, prefix: str) -> tuple[int, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.error(f"{prefix}{key}", f"expected a list of integers, got {value!r}")
        return tuple(value)


def _attention_from_dict(where: Where, raw: Any) -> AttentionSpec:
    operand_keys = set(OPERANDS)
    scalar_keys = {f.name for f in fields(AttentionSpec)} - operand_keys
    t = where.table(raw, "attention.", scalar_keys | operand_keys)
    p = "attention."
    spec = AttentionSpec(
        kind=where.choice(t, "kind", ("dense", "quantized", "draft"), "dense", p),
        rotation=where.choice(t, "rotation", ("none", "hadamard", "interleaved", "half"), "none", p),
        rope_segments=where.int_list(t, "rope_segments", p),
        rotate_v=where.scalar(t, "rotate_v", bool, False, p),
        smooth_k=where.scalar(t, "smooth_k", bool, False, p),
        smooth_q=where.scalar(t, "smooth_q", bool, False, p),
        smooth_q_group=where.scalar(t, "smooth_q_group", int, 128, p),
        placement=where.choice(t, "placement", ("pnq", "direct"), "pnq", p),
        tile_k=where.scalar(t, "tile_k", int, 128, p),
        **{o: _operand_from_dict(where, o, t.get(o, {})) for o in OPERANDS},
        draft=_draft_from_dict(where, t["draft"]) if "draft" in t else None,
    )
    if (spec.kind == "draft") != ("draft" in t):
        raise where.error(p + ("kind" if "draft" in t else "draft"), "kind = \"draft\" and an [attention.draft] table go together")
    if spec.kind == "draft" and set(t) - {"kind", "draft"}:
        extra = sorted(set(t) - {"kind", "draft"})[0]
        raise where.error(p + extra, "does not apply to kind 'draft' (its formats are fixed; see lowbit_video/attention/draft_exec.py)")
    if spec.smooth_q_group <= 0:
        raise where.error(p + "smooth_q_group", "must be positive")
    if spec.kind == "dense" and spec.quantized:
        raise where.error(p + "kind", "'dense' recipes cannot quantize operands; use kind = \"quantized\"")
    if spec.kind == "quantized" and not spec.quantized:
        raise where.error(p + "kind", "'quantized' recipe quantizes no operand (set attention.q/k/v/p.format)")
    p_block = spec.p.block_size if (spec.p.enabled and spec.p.granularity == "block") else 1
    if spec.tile_k <= 0 or spec.tile_k % p_block:
        raise where.error(p + "tile_k", f"must be a positive multiple of the P̃ block ({p_block}), got {spec.tile_k}")
    return spec


def _draft_from_dict(where: Where, raw: Any) -> DraftSpec:
    p = "attention.draft."
    t = where.table(raw, p, {f.name for f in fields(DraftSpec)})
    given = {name for name in ("fp16", "int8", "nvfp4") if name in t}
    kwargs = {
        "block": where.scalar(t, "block", int, 64, p),
        "maxpool_weight": where.scalar(t, "maxpool_weight", float, 0.0, p),
        "sparsity": where.scalar(t, "sparsity", float, 0.0, p),
        # Shares not written are 0 once any is written (all 16 bit when none is).
        **{name: where.scalar(t, name, float, 0.0 if given else float(name == "fp16"), p) for name in ("fp16", "int8", "nvfp4")},
    }
    try:
        return DraftSpec(**kwargs)
    except DraftSpecError as e:
        raise where.error(p + e.key, e.message) from None


def _operand_from_dict(where: Where, name: str, raw: Any) -> OperandQuant:
    prefix = f"attention.{name}."
    t = where.table(raw, prefix, {f.name for f in fields(OperandQuant)})
    fmt = where.choice(t, "format", FORMATS, "none", prefix)
    op = OperandQuant(
        format=fmt,
        granularity=where.choice(t, "granularity", GRANULARITIES[name], "block", prefix),
        block=where.scalar(t, "block", int, 0, prefix),
        group=where.scalar(t, "group", int, 128, prefix),
        rule=where.choice(t, "rule", MX_RULES, "uos", prefix),
        qmax=where.scalar(t, "qmax", float, 7.25, prefix),
        scheme=where.choice(t, "scheme", ("symmetric", "affine"), "symmetric", prefix),
        outer_scale=where.choice(t, "outer_scale", ("tensor", "row", "none"), "tensor", prefix),
        static_scale=where.scalar(t, "static_scale", float, 0.0, prefix),
    )
    if op.block < 0 or op.group <= 0:
        raise where.error(prefix + "block", "block and group must be positive")
    if fmt == "mxfp4" and op.block_size != 32:
        raise where.error(prefix + "block", "MXFP4 blocks are 32 elements")
    if fmt == "nvfp4" and op.block_size != 16:
        raise where.error(prefix + "block", "NVFP4 blocks are 16 elements")
    if fmt in ("mxfp4", "nvfp4") and op.granularity != "block":
        raise where.error(prefix + "granularity", f"{fmt} is block-scaled; granularity must be 'block'")
    if not (op.qmax > 0 and op.qmax < float("inf")):
        raise where.error(prefix + "qmax", f"must be a positive finite number, got {op.qmax}")
    if op.static_scale < 0 or (op.static_scale and fmt != "fp8_e4m3"):
        raise where.error(prefix + "static_scale", "a positive static scale applies to fp8_e4m3 only")
    if op.outer_scale == "row" and name != "p":
        raise where.error(prefix + "outer_scale", "'row' (two-level P̃ scaling) applies to attention.p only")
    explicit = set(t)
    format_keys = {
        "mxfp4": {"rule", "qmax"},
        "int8": {"scheme", "group"},
        "int4": {"scheme", "group"},
        "nvfp4": {"outer_scale"},
        "fp8_e4m3": {"static_scale", "group"},
    }
    for key in ("rule", "qmax", "scheme", "outer_scale", "static_scale"):
        if key in explicit and key not in format_keys.get(fmt, set()):
            raise where.error(prefix + key, f"does not apply to format {fmt!r}")
    if "qmax" in explicit and op.rule != "uos":
        raise where.error(prefix + "qmax", "only the 'uos' rule takes a qmax")
    return op


def _policy_from_dict(where: Where, raw: Any) -> PrecisionPolicy:
    p = "policy."
    t = where.table(raw, p, {"apply_to", "high_precision_blocks", "high_precision_steps"})
    apply_to = t.get("apply_to", ["self"])
    if not isinstance(apply_to, list) or not all(a in ("self", "cross") for a in apply_to):
        raise where.error(p + "apply_to", f"expected a list drawn from 'self', 'cross', got {apply_to!r}")
    blocks = where.int_list(t, "high_precision_blocks", p)
    return PrecisionPolicy(
        apply_to=tuple(apply_to),
        high_precision_blocks=blocks,
        high_precision_steps=where.int_list(t, "high_precision_steps", p),
    )
