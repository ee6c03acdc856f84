"""Every metric by name, with what it needs -- so availability is decided before anything heavy runs.

Kinds:
* "paired": compares a run's frames with its baseline (FP16) run's frames (psnr, ssim, cosine, lpips);
* "video":  scores one run alone, in-process (adherence, tiny-shapes only);
* "vbench": a VBench dimension, by VBench's own name, computed by `metrics.vbench` in a subprocess.

`weights` are manifest keys (metrics.weights.MANIFEST); `requires` python modules to import;
`models` the model families a metric applies to (None: every model).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from .weights import MANIFEST


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str
    description: str
    weights: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    higher_is_better: bool = True
    models: tuple[str, ...] | None = None


def _keys(metric: str) -> tuple[str, ...]:
    return tuple(w.key for w in MANIFEST if metric in w.used_by)


_PAIRED = (
    MetricSpec("psnr", "paired", "PSNR (dB) vs the baseline run, frames in [0,1], mean over frames", requires=("skimage",)),
    MetricSpec("ssim", "paired", "SSIM vs the baseline run (scikit-image, data_range 1), mean over frames",
               requires=("skimage",)),
    MetricSpec("cosine", "paired", "cosine similarity of each flattened frame with the baseline's, mean over frames"),
    MetricSpec("mse", "paired", "MSE vs the baseline run on the 0-255 scale, mean over frames", higher_is_better=False),
    MetricSpec("lpips", "paired", "LPIPS (AlexNet, v0.1) vs the baseline run, mean over frames", _keys("lpips"),
               ("lpips", "torchvision"), higher_is_better=False),
)
_VIDEO = (
    MetricSpec("adherence", "video", "tiny-shapes prompt adherence: mean of colour, motion and shape detected as prompted",
               models=("tiny-shapes",)),
)
# VBench dimensions (evaluation-offline.md §3), with the python modules they import.
_VBENCH_INFO: dict[str, tuple[str, tuple[str, ...]]] = {
    "subject_consistency": ("VBench: DINO feature consistency of the subject across frames", ()),
    "background_consistency": ("VBench: CLIP feature consistency of the background across frames", ("clip",)),
    "temporal_flickering": ("VBench formula, no static filter: (255 - mean |frame_t - frame_t+1|) / 255 (no weights)", ("cv2",)),
    "motion_smoothness": ("VBench: AMT frame-interpolation error of dropped frames", ("omegaconf",)),
    "dynamic_degree": ("VBench: fraction of videos with large RAFT optical flow", ("easydict",)),
    "aesthetic_quality": ("VBench: LAION aesthetic predictor on CLIP ViT-L/14", ("clip",)),
    "imaging_quality": ("VBench: MUSIQ (SPAQ) image quality", ("pyiqa",)),
    "human_action": ("VBench: UMT Kinetics-400 action recognition of the prompted action", ("timm",)),
    "temporal_style": ("VBench: ViCLIP video-text similarity of the temporal style", ("clip",)),
    "overall_consistency": ("VBench: ViCLIP video-text similarity of the whole prompt", ("clip",)),
    # VBench standard mode only: runs of VBench's own prompts (generate --prompts vbench[:<dimension>])
    "object_class": ("VBench standard mode: GRiT detects the prompted object", ("detectron2",)),
    "multiple_objects": ("VBench standard mode: GRiT detects both prompted objects", ("detectron2",)),
    "color": ("VBench standard mode: the prompted object has the prompted colour (GRiT)", ("detectron2",)),
    "spatial_relationship": ("VBench standard mode: GRiT boxes in the prompted relation", ("detectron2",)),
    "scene": ("VBench standard mode: Tag2Text caption names the prompted scene", ("timm",)),
    "appearance_style": ("VBench standard mode: CLIP similarity to the prompted style", ("clip",)),
}


def vbench_dimensions() -> tuple[str, ...]:
    """`metrics.vbench.VBENCH_DIMENSIONS` when the VBench integration is installed, else the known names."""
    try:
        from . import vbench
    except ImportError:
        return tuple(_VBENCH_INFO)
    return tuple(getattr(vbench, "VBENCH_DIMENSIONS", tuple(_VBENCH_INFO)))


def _vbench_spec(dim: str) -> MetricSpec:
    desc, mods = _VBENCH_INFO.get(dim, (f"VBench dimension {dim}", ()))
    requires = ("vbench",) + mods
    try:  # the VBench integration's own descriptions and dependency lists, when installed
        from . import vbench

        desc = getattr(vbench, "DESCRIPTIONS", {}).get(dim, desc)
        deps = getattr(vbench, "DIMENSION_DEPS", {})
        if dim in deps:
            requires = tuple(dict.fromkeys((*getattr(vbench, "_COMMON_DEPS", ("vbench",)), *deps[dim])))
    except ImportError:
        pass
    return MetricSpec(dim, "vbench", desc, _keys(dim), requires)


def list_metrics() -> list[MetricSpec]:
    return [*_PAIRED, *_VIDEO, *(_vbench_spec(d) for d in vbench_dimensions())]


def get_metric(name: str) -> MetricSpec:
    for m in list_metrics():
        if m.name == name:
            return m
    known = ", ".join(m.name for m in list_metrics())
    raise UserError(f"unknown metric {name!r} (known: {known})")


def default_metrics() -> tuple[str, ...]:
    """Everything: psnr, ssim, cosine, mse, lpips, adherence (tiny-shapes runs) and every VBench dimension."""
    return tuple(m.name for m in list_metrics())


DEFAULT_METRICS = tuple(m.name for m in (*_PAIRED, *_VIDEO)) + tuple(_VBENCH_INFO)

__all__ = ["DEFAULT_METRICS", "MetricSpec", "default_metrics", "get_metric", "list_metrics", "vbench_dimensions"]
