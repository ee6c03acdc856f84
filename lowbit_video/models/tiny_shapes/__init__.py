"""tiny-shapes: data and evaluation for the shipped tiny text-to-video model.

Prompts follow a closed grammar ("a red circle moving left on a black background"; see `grammar`),
clips are rendered procedurally (8 frames of 32x32 RGB; see `clips`), and `adherence` scores a
generated clip against its prompt from the pixels alone. numpy + scipy only; no torch.

Prompt files (prompts/*.txt) hold one prompt per line; blank lines and lines starting with '#' are
comments (`read_prompts`).
"""

from .adherence import detect, score_clip, score_many
from .clips import batch, render_clip
from .grammar import (
    BACKGROUNDS,
    COLORS,
    MOTIONS,
    SHAPES,
    ClipSpec,
    ObjectSpec,
    all_prompts,
    balanced_prompts,
    parse_prompt,
    read_prompts,
    sample_prompts,
    vocabulary,
)

__all__ = [
    "BACKGROUNDS",
    "COLORS",
    "MOTIONS",
    "SHAPES",
    "ClipSpec",
    "ObjectSpec",
    "all_prompts",
    "balanced_prompts",
    "batch",
    "detect",
    "parse_prompt",
    "read_prompts",
    "render_clip",
    "sample_prompts",
    "score_clip",
    "score_many",
    "vocabulary",
]
