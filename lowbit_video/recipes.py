"""Recipes are data: TOML files under recipes/, loaded into frozen, validated objects.

A recipe says what attention does numerically (rotation, smoothing, a quantizer per operand, where
the softmax tile is quantized) and which parts of a model keep 16-bit attention (its precision
policy). Recipe names are looked up in the folders of $LOWBIT_VIDEO_RECIPES, then in the recipes
shipped inside the package (lowbit_video/data: the same from a checkout, a wheel or a zip). Files may
`include` a base file: a path relative to the including file, else relative to a recipe folder
(`recipe_dirs`: so `include = "base/mxattention.toml"` works from any folder);
tables are merged key by key, the including file winning. Unknown keys and values out of range are
one-line errors that name the file, the key and the valid range (`SCHEMA` lists every field's).
The name "fp16" is kept for the unquantized baseline: runs land in a folder named after the recipe,
and evaluate pairs every run with the one in the fp16 folder.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from .errors import RecipeError, UserError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

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
# UOS clipping boundary: a block's maximum lands in (qmax/2, qmax] before E2M1 rounding. At or below 3
# no block reaches E2M1's top values 4 and 6 (a wasted binade); at or above 12 every block's maximum
# exceeds 6 and is clipped. Outside the open interval the format loses its meaning (and 1e-300 or
# 1e308 push the E8M0 exponent out of range: NaN or all-zero tensors).
QMAX_RANGE = (3.0, 12.0)
# FP8 static scale: stored as float32; x / scale must be finite, so a normal float32 (2^-126 .. 2^127)
STATIC_SCALE_RANGE = (2.0 ** -126, 2.0 ** 127)
MAX_NESTING = 64  # tables nested deeper than this are no recipe or study (the parser would recurse away)
BASELINE_NAME = "fp16"
T = TypeVar("T")

# Every field and its valid values: what `recipes validate` states on an error and `recipes schema`
# lists. Keys are TOML key paths; <op> is one of q, k, v, p.
SCHEMA: dict[str, str] = {
    "name": "non-empty string (default: the file name); 'fp16' only for a dense recipe (the baseline)",
    "description": "one-line string",
    "paper": "string",
    "include": "path of a base file, relative to this file or to a recipe folder",
    "attention.kind": "dense | quantized | draft",
    "attention.rotation": "none | hadamard | interleaved | half",
    "attention.rotation_sigma": "1 (orthogonal) or, with rotation interleaved | half, a positive finite number",
    "attention.rope_segments": "list of positive integers summing to head_dim ([] = the model's)",
    "attention.rotate_v": "true | false",
    "attention.smooth_k": "true | false",
    "attention.smooth_q": "true | false",
    "attention.smooth_q_group": "integer >= 1 (tokens per group)",
    "attention.placement": "pnq | direct",
    "attention.tile_k": "integer >= 1, a multiple of the P̃ block",
    "attention.<op>.format": " | ".join(FORMATS),
    "attention.<op>.granularity": "q, k: block | per_token | per_token_group; v: block | per_channel; p: block | per_row",
    "attention.<op>.block": "0 (the format's default) or >= 1; mxfp4: 32, nvfp4: 16",
    "attention.<op>.group": "integer >= 1 (tokens per group, per_token_group)",
    "attention.<op>.rule": "mxfp4 only: " + " | ".join(MX_RULES),
    "attention.<op>.qmax": f"mxfp4 with rule uos only: a number in the open interval ({QMAX_RANGE[0]:g}, {QMAX_RANGE[1]:g})",
    "attention.<op>.scheme": "int8, int4 only: symmetric | affine",
    "attention.<op>.outer_scale": "nvfp4 only: tensor | row (p only) | none",
    "attention.<op>.static_scale": f"fp8_e4m3 only: 0 (dynamic) or a number in [2^-126, 2^127] (a normal float32)",
    "attention.draft.block": "64 | 128",
    "attention.draft.maxpool_weight": "number in [0, 1]",
    "attention.draft.sparsity": "number in [0, 1)",
    "attention.draft.fp16": "share >= 0; fp16 + int8 + nvfp4 = 1",
    "attention.draft.int8": "share >= 0; fp16 + int8 + nvfp4 = 1",
    "attention.draft.nvfp4": "share >= 0; fp16 + int8 + nvfp4 = 1",
    "policy.apply_to": "list drawn from self, cross",
    "policy.high_precision_blocks": "list of integers (negative: from the end)",
    "policy.high_precision_steps": "list of integers (negative: from the end)",
    "policy.high_precision_calls": "list of [block, step] integer pairs kept in 16 bit (negative: from the end)",
}


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
    # Singular values (σ, 1/σ) of every 2×2 block of a pair rotation: H2·diag(σ, 1/σ) on Q, its
    # inverse transpose on K. 1 = orthogonal (RotateAttention's requirement); σ ≠ 1 is the paper's
    # "unconstrained rotation" negative control (QKᵀ still exact, one operand's outliers inflated).
    rotation_sigma: float = 1.0
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
    # single (block, step) cells kept at 16 bit (what `lowbit-video profile --budget` writes); negative = from the end
    high_precision_calls: tuple[tuple[int, int], ...] = ()

    def quantizes(self, *, block: int, step: int, num_steps: int, num_blocks: int, attention_type: str = "self") -> bool:
        if attention_type not in self.apply_to:
            return False
        blocks = {b if b >= 0 else num_blocks + b for b in self.high_precision_blocks}
        steps = {s if s >= 0 else num_steps + s for s in self.high_precision_steps}
        calls = {(b if b >= 0 else num_blocks + b, s if s >= 0 else num_steps + s) for b, s in self.high_precision_calls}
        return block not in blocks and step not in steps and (block, step) not in calls


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


def recipe_dirs() -> list["Traversable"]:
    """Where recipe names are looked up: $LOWBIT_VIDEO_RECIPES (os.pathsep-separated folders), then
    the recipes shipped with the package (`lowbit_video.data.recipes`: the repository's recipes/)."""
    from . import data

    dirs: list[Traversable] = [Path(p) for p in os.environ.get("LOWBIT_VIDEO_RECIPES", "").split(os.pathsep) if p]
    dirs.append(data.recipe_folder())
    return dirs


def toml_files(folder: "Traversable") -> list["Traversable"]:
    """The *.toml files at the top of `folder` (none when it is no folder), by name."""
    if not folder.is_dir():
        return []
    return sorted((f for f in folder.iterdir() if f.name.endswith(".toml") and f.is_file()), key=lambda f: f.name)


def file_stem(file: "Traversable") -> str:
    return file.name.rsplit(".", 1)[0] if "." in file.name else file.name


def available_recipes() -> dict[str, "Traversable"]:
    """Recipe name -> file, for every top-level *.toml in the recipe folders (bases live in base/);
    a name in an earlier folder hides the same name in later ones."""
    found: dict[str, Traversable] = {}
    for d in recipe_dirs():
        for file in toml_files(d):
            found.setdefault(file_stem(file), file)
    return found


def load_each(files: Mapping[str, "Traversable"], load: Callable[[Any], T]) -> tuple[list[T], list[UserError]]:
    """`load` of every file (in name order) that loads, and the one-line error of each one that does
    not: a broken file among good ones hides none of them (the recipe and study listings)."""
    good: list[T] = []
    broken: list[UserError] = []
    for _, file in sorted(files.items()):
        try:
            good.append(load(file))
        except UserError as e:
            broken.append(e)
    return good, broken


def load_all() -> tuple[list[Recipe], list[UserError]]:
    """Every available recipe that loads, and the error of each one that does not."""
    return load_each(available_recipes(), recipe_from_file)


def is_traversable(value: Any) -> bool:
    """A file handed over as an importlib.resources Traversable (e.g. inside a zip), not as a path."""
    return not isinstance(value, (str, os.PathLike)) and hasattr(value, "read_bytes") and hasattr(value, "joinpath")


def load_recipe(name_or_path: "str | os.PathLike | Recipe | Traversable") -> Recipe:
    """A recipe by name (e.g. "mxattention"), by path to a TOML file, or a file `available_recipes` listed."""
    if isinstance(name_or_path, Recipe):
        return name_or_path
    if is_traversable(name_or_path):
        return recipe_from_file(name_or_path)
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".toml") or path.exists():
        if not path.is_file():
            raise RecipeError(f"{text}: no such recipe file")
        return recipe_from_file(path)
    known = available_recipes()
    if text not in known:
        raise RecipeError(f"unknown recipe {text!r}; known recipes: {', '.join(sorted(known)) or 'none'}")
    return recipe_from_file(known[text])


def recipe_from_file(path: "Path | Traversable") -> Recipe:
    file = path if is_traversable(path) else Path(path)
    data = read_with_includes(file, seen=())
    return recipe_from_dict(data, source=str(file), default_name=file_stem(file))


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of tables and arrays, counted iteratively (no recursion to run out of)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            break
        if isinstance(v, Mapping):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def _read_toml(path: "Traversable") -> dict[str, Any]:
    too_deep = RecipeError(f"{path}: tables or arrays nested more than {MAX_NESTING} deep; not a recipe or study file")
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise RecipeError(f"{path}: is a folder, not a TOML file") from None
    except OSError as e:
        raise RecipeError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # TOML is UTF-8 text; a binary or Latin-1 file is no recipe
        line = raw[: e.start].count(b"\n") + 1
        raise RecipeError(f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}, line {line}); "
                          "a recipe or study is a TOML text file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:  # tomllib parses nested values recursively
        raise too_deep from None
    if _depth(data, MAX_NESTING) > MAX_NESTING:
        raise too_deep
    return data


def _join(folder: "Traversable", relative: str) -> "Traversable":
    """`folder` / `relative` ('/'-separated), one part at a time (all a Traversable promises)."""
    if isinstance(folder, Path):
        return folder / relative
    out = folder
    for part in (p for p in relative.split("/") if p and p != "."):
        out = out.joinpath(part)
    return out


def file_key(file: "Path | Traversable") -> str:
    """What identifies a file: its resolved path on disk, else (inside a zip) where it is in the archive."""
    return str(file.resolve()) if isinstance(file, Path) else str(file)


def _include_path(path: "Traversable", include: str) -> "Traversable":
    """The included file: relative to the including file, else to a recipe folder."""
    beside = getattr(path, "parent", None)  # pathlib and zip paths have one; a bare Traversable may not
    folders = ([beside] if beside is not None else []) + recipe_dirs()
    candidates = [_join(f, include) for f in folders]
    for c in candidates:
        if c.is_file():
            return c
    if candidates and candidates[0].is_dir():
        raise RecipeError(f"{path}: include: {candidates[0]} is a folder, not a TOML file")
    where = ", ".join(str(f) for f in folders)
    raise RecipeError(f"{path}: include: no file {include!r} beside it or in a recipe folder (looked in {where})")


def read_with_includes(path: "Path | Traversable", seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A TOML file with its `include` chain merged (the included file first, this one over it); shared
    by recipe and study files. `seen` (file_key of each file on the way) guards against include cycles."""
    if not is_traversable(path):
        path = Path(path)
    key = file_key(path)
    if key in seen:
        raise RecipeError(f"{path}: include cycle ({' -> '.join(seen + (key,))})")
    data = _read_toml(path)
    include = data.pop("include", None)
    if include is None:
        return data
    if not isinstance(include, str) or not include:
        raise RecipeError(f"{path}: include: expected a file path string")
    base = read_with_includes(_include_path(path, include), seen + (key,))
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
    if name == BASELINE_NAME and attention.kind != "dense":
        raise where.error("name", f"{BASELINE_NAME!r} is kept for the unquantized baseline (runs of a recipe land "
                          f"in a folder named after it, and evaluate pairs every run with the {BASELINE_NAME} one); "
                          f"name this {attention.kind} recipe otherwise")
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
        rotation_sigma=where.scalar(t, "rotation_sigma", float, 1.0, p),
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
        raise where.error(p + "smooth_q_group", f"must be {SCHEMA['attention.smooth_q_group']}, got {spec.smooth_q_group}")
    if any(s <= 0 for s in spec.rope_segments):
        raise where.error(p + "rope_segments", f"must be a {SCHEMA['attention.rope_segments']}, got {list(spec.rope_segments)}")
    if not (0.0 < spec.rotation_sigma < float("inf")) or (spec.rotation_sigma != 1.0 and spec.rotation not in ("interleaved", "half")):
        raise where.error(p + "rotation_sigma", f"must be {SCHEMA['attention.rotation_sigma']}, got {spec.rotation_sigma} "
                                                f"(rotation = {spec.rotation!r})")
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
    if op.block < 0:
        raise where.error(prefix + "block", f"must be {SCHEMA['attention.<op>.block']}, got {op.block}")
    if op.group <= 0:
        raise where.error(prefix + "group", f"must be an {SCHEMA['attention.<op>.group']}, got {op.group}")
    if fmt == "mxfp4" and op.block_size != 32:
        raise where.error(prefix + "block", "MXFP4 blocks are 32 elements")
    if fmt == "nvfp4" and op.block_size != 16:
        raise where.error(prefix + "block", "NVFP4 blocks are 16 elements")
    if fmt in ("mxfp4", "nvfp4") and op.granularity != "block":
        raise where.error(prefix + "granularity", f"{fmt} is block-scaled; granularity must be 'block'")
    check_qmax(where, prefix + "qmax", op.qmax)
    if op.static_scale < 0 or (op.static_scale and fmt != "fp8_e4m3"):
        raise where.error(prefix + "static_scale", "a positive static scale applies to fp8_e4m3 only")
    lo, hi = STATIC_SCALE_RANGE
    if op.static_scale and not lo <= op.static_scale <= hi:
        raise where.error(prefix + "static_scale", f"must be {SCHEMA['attention.<op>.static_scale'].split(': ', 1)[1]}, "
                          f"got {op.static_scale!r}")
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


def check_qmax(where: "Where", key: str, q: float) -> None:
    """RecipeError unless `q` lies in QMAX_RANGE (shared with the studies that take a UOS boundary)."""
    lo, hi = QMAX_RANGE
    if not lo < q < hi:
        raise where.error(key, f"must be in the open interval ({lo:g}, {hi:g}), got {q!r}: at or below {lo:g} "
                          f"no block reaches E2M1's top values 4 and 6, at or above {hi:g} every block's maximum "
                          "is clipped to 6")


def _policy_from_dict(where: Where, raw: Any) -> PrecisionPolicy:
    p = "policy."
    t = where.table(raw, p, {"apply_to", "high_precision_blocks", "high_precision_steps", "high_precision_calls"})
    apply_to = t.get("apply_to", ["self"])
    if not isinstance(apply_to, list) or not all(a in ("self", "cross") for a in apply_to):
        raise where.error(p + "apply_to", f"expected a list drawn from 'self', 'cross', got {apply_to!r}")
    blocks = where.int_list(t, "high_precision_blocks", p)
    return PrecisionPolicy(
        apply_to=tuple(apply_to),
        high_precision_blocks=blocks,
        high_precision_steps=where.int_list(t, "high_precision_steps", p),
        high_precision_calls=_call_list(where, t, "high_precision_calls", p),
    )


def _call_list(where: Where, table: Mapping[str, Any], key: str, prefix: str) -> tuple[tuple[int, int], ...]:
    value = table.get(key, [])
    pair = lambda v: (isinstance(v, list) and len(v) == 2
                      and all(isinstance(x, int) and not isinstance(x, bool) for x in v))
    if not isinstance(value, list) or not all(pair(v) for v in value):
        raise where.error(f"{prefix}{key}", f"expected a {SCHEMA['policy.high_precision_calls']}, got {value!r}")
    return tuple((v[0], v[1]) for v in value)
