"""The recipe schema: every key a recipe file may set, declared once on the frozen dataclasses a
recipe loads into (default, valid values, meaning; lowbit_video/toml_schema.py reads them).

`SCHEMA` (what `recipes schema` prints and `recipes validate` states) and the loader's per-key
checks (lowbit_video/recipes.py) are derived from these declarations; a new key is one `setting`
line here (plus the code that acts on it). Relations between keys (kind against the operands,
format-specific keys, the P̃ block and tile_k) are checked by the loader.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .toml_schema import SettingError, check_fields, schema_lines, setting, table

FORMATS = ("none", "mxfp4", "nvfp4", "int8", "int4", "fp8_e4m3")
MX_RULES = ("ocp", "tfs", "uos")
OPERANDS = ("q", "k", "v", "p")
# Block axes are fixed (as the MXAttention paper's implementation): Q and K along head_dim, V along
# tokens per channel (the reduction axis of P·V), P̃ along keys per row. `granularity` picks the
# group sharing one scale on that axis.
GRANULARITIES = {
    "q": ("block", "per_token", "per_token_group"),
    "k": ("block", "per_token", "per_token_group", "per_thread"),
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
ROTATIONS = ("none", "hadamard", "interleaved", "half")
NON_ORTHOGONAL_ROTATIONS = ("interleaved", "half")  # the pair rotations that take a rotation_sigma
BASELINE_NAME = "fp16"
INCLUDE = "the path of a base file, relative to this file or to a recipe folder"  # read before validation


def in_qmax_range(q: float) -> bool:
    lo, hi = QMAX_RANGE
    return lo < q < hi


def qmax_refusal(q: float) -> str:
    """Why a UOS boundary outside QMAX_RANGE is refused (shared with the studies that take one)."""
    lo, hi = QMAX_RANGE
    return (f"must be in the open interval ({lo:g}, {hi:g}), got {q!r}: at or below {lo:g} no block reaches E2M1's "
            f"top values 4 and 6, at or above {hi:g} every block's maximum is clipped to 6")


def _static_scale_ok(s: float) -> bool:
    lo, hi = STATIC_SCALE_RANGE
    return s == 0 or lo <= s <= hi


def _share_ok(x: float) -> bool:
    return 0.0 <= x < math.inf


SHARE = "a share >= 0; fp16 + int8 + nvfp4 = 1"


@dataclass(frozen=True)
class OperandQuant:
    """How one attention operand (Q, K, V or the unnormalized softmax tile P̃) is quantized."""

    format: str = setting("none", "number format of the operand", choices=FORMATS)
    granularity: str = setting("block", "the group sharing one scale on the operand's block axis",
                               choices=GRANULARITIES)
    block: int = setting(0, "elements per block along the operand's axis; 0 = the format's default",
                         valid="0 (the format's default) or >= 1; " + ", ".join(f"{f}: {n}" for f, n in DEFAULT_BLOCK.items()),
                         check=lambda n: n >= 0)
    group: int = setting(128, "tokens per group for per_token_group (SageAttention's per-block Q/K scales); for "
                              "per_thread, the key block split into 4 interleaved groups",
                         valid="an integer >= 1 (tokens per group, per_token_group; a multiple of 8, per_thread)",
                         check=lambda n: n >= 1)
    rule: str = setting("uos", "MXFP4 shared-scale rule", choices=MX_RULES, only=("mxfp4",))
    qmax: float = setting(7.25, "UOS clipping boundary",
                          valid=f"a number in the open interval ({QMAX_RANGE[0]:g}, {QMAX_RANGE[1]:g})",
                          check=in_qmax_range, refusal=qmax_refusal, only=("mxfp4",), scope="mxfp4 with rule uos")
    scheme: str = setting("symmetric", "integer formats: symmetric or affine (scale, zero point)",
                          choices=("symmetric", "affine"), only=("int8", "int4"))
    outer_scale: str = setting("tensor", "NVFP4 second-level FP32 scale: tensor, row (two-level P̃), none",
                               valid="tensor | row (p only) | none", choices=("tensor", "row", "none"), only=("nvfp4",))
    static_scale: float = setting(0.0, "FP8: fixed scale instead of amax/448 (e.g. 1/448 for P̃ in [0, 1])",
                                  valid="0 (dynamic) or a number in [2^-126, 2^127] (a normal float32)",
                                  check=_static_scale_ok, only=("fp8_e4m3",))

    @property
    def enabled(self) -> bool:
        return self.format != "none"

    @property
    def block_size(self) -> int:
        return self.block or DEFAULT_BLOCK.get(self.format, 32)


class DraftSpecError(SettingError):
    """A DraftSpec value out of range; `key` names the field (the loader adds file and table)."""


@dataclass(frozen=True)
class DraftSpec:
    """DraftAttention2's routing budget (`kind = "draft"`, table [attention.draft]).

    Per head, `sparsity` of the video region pairs are skipped; the retained ones split between
    16-bit, 8-bit (INT8 QKᵀ, FP8 P̃·V) and 4-bit (NVFP4) as fp16 : int8 : nvfp4 (shares summing
    to one), highest draft scores at the highest precision. The defaults are dense 16-bit attention.
    A file that writes any share leaves the others at 0 (the loader's rule).
    """

    block: int = setting(64, "tokens per packed region block", choices=(64, 128))
    maxpool_weight: float = setting(0.0, "weight of the max-pooled draft map; 0 = mean pooling only",
                                    valid="a number in [0, 1]", check=lambda w: 0.0 <= w <= 1.0)
    sparsity: float = setting(0.0, "skipped fraction of the video region pairs",
                              valid="a number in [0, 1)", check=lambda s: 0.0 <= s < 1.0)
    fp16: float = setting(1.0, "share of the retained pairs at 16 bit", valid=SHARE, check=_share_ok)
    int8: float = setting(0.0, "share at 8 bit", valid=SHARE, check=_share_ok)
    nvfp4: float = setting(0.0, "share at 4 bit", valid=SHARE, check=_share_ok)

    def __post_init__(self):
        check_fields(self, DraftSpecError)
        total = self.fp16 + self.int8 + self.nvfp4
        if abs(total - 1.0) > 1e-9:
            raise DraftSpecError("fp16", f"the retained shares fp16 + int8 + nvfp4 must sum to 1, got {total!r}")


@dataclass(frozen=True)
class AttentionSpec:
    """What a recipe asks of attention. `kind = "dense"` is plain softmax attention."""

    kind: str = setting("dense", "dense: plain softmax; quantized: per-operand formats; draft: DraftAttention2",
                        choices=("dense", "quantized", "draft"))
    rotation: str = setting("none", "orthogonal rotation of Q and K (QKᵀ unchanged in exact arithmetic): none | "
                            "hadamard (full D×D) | interleaved (2×2 on channel pairs (2i, 2i+1)) | half (within "
                            "each RoPE segment, i with i + D_j/2)", choices=ROTATIONS)
    rotation_sigma: float = setting(
        1.0, "singular values (σ, 1/σ) of every 2×2 block of a pair rotation: H2·diag(σ, 1/σ) on Q, its inverse "
        "transpose on K. 1 = orthogonal (RotateAttention's requirement); σ ≠ 1 is the paper's \"unconstrained "
        "rotation\" negative control (QKᵀ still exact, one operand's outliers inflated)",
        valid=f"1 (orthogonal) or, with rotation {' | '.join(NON_ORTHOGONAL_ROTATIONS)}, a positive finite number")
    rope_segments: tuple[int, ...] = setting((), "t/h/w RoPE segment sizes; () = the model's (Wan: 44/42/42 at D=128)",
                                             valid="a list of positive integers summing to head_dim ([] = the model's)",
                                             check=lambda segs: all(s > 0 for s in segs))
    rotate_v: bool = setting(False, "Hadamard on V, its inverse applied to the output (folded into W_o in a model)")
    smooth_k: bool = setting(False, "subtract K's per-channel mean over tokens (softmax-invariant)")
    smooth_q: bool = setting(False, "subtract Q's per-group mean; the removed part is added back in full precision")
    smooth_q_group: int = setting(128, "tokens per group of smooth_q", valid="an integer >= 1 (tokens per group)",
                                  check=lambda n: n >= 1)
    placement: str = setting("pnq", "pnq: ℓ and Õ from the same quantized P̂; direct: ℓ from P̃, Õ from P̂",
                             choices=("pnq", "direct"))
    tile_k: int = setting(128, "keys per online-softmax tile", valid="an integer >= 1, a multiple of the P̃ block")
    q: OperandQuant = table(OperandQuant, "how Q is quantized", shown="<op>")
    k: OperandQuant = table(OperandQuant, "how K is quantized", shown="<op>")
    v: OperandQuant = table(OperandQuant, "how V is quantized", shown="<op>")
    p: OperandQuant = table(OperandQuant, "how P̃ is quantized", shown="<op>")
    draft: DraftSpec | None = table(DraftSpec, "kind = \"draft\" only: DraftAttention2's routing budget", optional=True)

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

    apply_to: tuple[str, ...] = setting(("self",), "attention types that are quantized", choices=("self", "cross"))
    high_precision_blocks: tuple[int, ...] = setting((), "transformer block indices kept at 16 bit",
                                                     valid="a list of integers (negative: from the end)")
    high_precision_steps: tuple[int, ...] = setting((), "denoising steps kept at 16 bit",
                                                    valid="a list of integers (negative: from the end)")
    # what `lowbit-video profile --budget` writes: the sensitive calls, not whole blocks or steps
    high_precision_calls: tuple[tuple[int, int], ...] = setting(
        (), "single (block, step) cells kept at 16 bit", width=2,
        valid="a list of pairs of integers, block and step (negative: from the end)")

    def quantizes(self, *, block: int, step: int, num_steps: int, num_blocks: int, attention_type: str = "self") -> bool:
        if attention_type not in self.apply_to:
            return False
        blocks = {b if b >= 0 else num_blocks + b for b in self.high_precision_blocks}
        steps = {s if s >= 0 else num_steps + s for s in self.high_precision_steps}
        calls = {(b if b >= 0 else num_blocks + b, s if s >= 0 else num_steps + s) for b, s in self.high_precision_calls}
        return block not in blocks and step not in steps and (block, step) not in calls


@dataclass(frozen=True)
class Recipe:
    name: str = setting("", "the recipe's name (default: the file name)",
                        valid=f"a non-empty string (default: the file name); {BASELINE_NAME!r} only for a dense recipe "
                              "(the baseline)")
    description: str = setting("", "what the recipe does, in one line", valid="a one-line string")
    attention: AttentionSpec = table(AttentionSpec, "what attention does numerically")
    policy: PrecisionPolicy = table(PrecisionPolicy, "which attention calls keep 16 bit")
    source: str = ""  # the file it was read from (not a key)
    paper: str = setting("", "where the method comes from", valid="a string")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Every key and its valid values: what `recipes validate` states on an error and `recipes schema`
# lists. Keys are TOML key paths; <op> is one of q, k, v, p.
SCHEMA: dict[str, str] = schema_lines(Recipe, extra={"include": INCLUDE})
