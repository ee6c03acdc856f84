"""Every metric by name: one `MetricSpec` each, the single source that evaluate, compare, the plots and
`lowbit-video metrics` read. Adding a metric is one spec here plus its function in its module.

Kinds:
* "paired": compares a run's frames with its baseline (FP16) run's frames (psnr, ssim, cosine, mse, lpips);
* "video":  scores one run alone, in-process (adherence, tiny-shapes only);
* "vbench": a VBench dimension, by VBench's own name, scored by `metrics.vbench` in one subprocess for
  all runs (its spec comes from that module's `DIMENSIONS` table).

A spec says what is listed by `metrics` (`listing`: name, kind, description, weights, requires,
direction, models) and how the rest of the package treats the metric:

* `compute(MetricInput) -> (value, details)` for the in-process kinds; `precheck(weights root)` the
  reason it cannot run here (missing packages or weights) or None; `refuse(run meta)` the reason a
  run it applies to cannot have it (a VBench suite-only dimension on a free-text prompt) or None;
* `weights`: manifest keys (metrics.weights.MANIFEST, whose entries name the metrics using them);
  `requires`: python modules to import; `models`: the model names or families a metric applies to
  (None: every model);
* compare's column: `label`, `decimals`, `column` (its rank: VBench 100s, other per-video metrics
  200, paired 300s, adherence 400) and `shown` -- "always", "present" (some run has it),
  "scored" (some run has a number) or "applies" (some run is one it applies to, or present).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import UserError
from . import lpips_metric, paired, vbench, video
from .weights import MANIFEST

UNREGISTERED_COLUMN = 200  # a metric a metrics.json holds that this version does not know


@dataclass(frozen=True)
class MetricInput:
    """What a metric's compute reads; frames are loaded on first call (baselines are shared)."""

    frames: Callable[[], Any]            # the run's exact frames (T, H, W, 3) uint8
    baseline_frames: Callable[[], Any]   # its baseline run's frames (paired metrics only)
    prompt: str
    weights_root: Path


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str
    description: str
    weights: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    higher_is_better: bool = True
    models: tuple[str, ...] | None = None
    compute: Callable[[MetricInput], tuple[Any, dict]] | None = field(default=None, compare=False)
    precheck: Callable[[Path], str | None] | None = field(default=None, compare=False)
    refuse: Callable[[dict], str | None] | None = field(default=None, compare=False)
    label: str = ""
    decimals: int = 4
    column: int = UNREGISTERED_COLUMN
    shown: str = "present"

    @property
    def paired(self) -> bool:
        return self.kind == "paired"

    def applies_to(self, model: str | None, family: str | None) -> bool:
        return not self.models or model in self.models or family in self.models

    def listing(self) -> dict:
        """The spec as `lowbit-video metrics --json` lists it."""
        return {"name": self.name, "kind": self.kind, "description": self.description, "weights": self.weights,
                "requires": self.requires, "higher_is_better": self.higher_is_better, "models": self.models}


def _keys(metric: str) -> tuple[str, ...]:
    return tuple(w.key for w in MANIFEST if metric in w.used_by)


def against_baseline(fn: Callable[[Any, Any], float]) -> Callable[[MetricInput], tuple[Any, dict]]:
    """A function of (frames, baseline frames) as a compute."""
    def compute(inp: MetricInput) -> tuple[Any, dict]:
        return fn(inp.frames(), inp.baseline_frames()), {}
    return compute


def _lpips(inp: MetricInput) -> tuple[Any, dict]:
    return lpips_metric.lpips_distance(inp.frames(), inp.baseline_frames(), lpips_metric.load_model(inp.weights_root)), {}


def _adherence(inp: MetricInput) -> tuple[Any, dict]:
    return video.adherence(inp.frames(), inp.prompt)


_IN_PROCESS = (
    MetricSpec("psnr", "paired", "PSNR (dB) vs the baseline run, frames in [0,1], mean over frames", requires=("skimage",),
               compute=against_baseline(paired.psnr), label="PSNR", decimals=2, column=302, shown="always"),
    MetricSpec("ssim", "paired", "SSIM vs the baseline run (scikit-image, data_range 1), mean over frames",
               requires=("skimage",), compute=against_baseline(paired.ssim), label="SSIM", column=301, shown="always"),
    MetricSpec("cosine", "paired", "cosine similarity of each flattened frame with the baseline's, mean over frames",
               compute=against_baseline(paired.cosine), label="Cosine", column=300, shown="always"),
    MetricSpec("mse", "paired", "MSE vs the baseline run on the 0-255 scale, mean over frames", higher_is_better=False,
               compute=against_baseline(paired.mse), label="MSE", decimals=2, column=303),
    MetricSpec("lpips", "paired", "LPIPS (AlexNet, v0.1) vs the baseline run, mean over frames", _keys("lpips"),
               ("lpips", "torchvision"), higher_is_better=False, compute=_lpips, precheck=lpips_metric.unavailable,
               label="LPIPS", column=304, shown="always"),
    MetricSpec("adherence", "video",
               "tiny-shapes prompt adherence: mean of colour, motion and shape detected as prompted",
               models=("tiny-shapes",), compute=_adherence, label="Adherence", column=400, shown="applies"),
)


def _vbench_spec(rank: int, dim: vbench.Dimension) -> MetricSpec:
    requires = tuple(dict.fromkeys((*vbench._COMMON_DEPS, *dim.deps)))

    def precheck(root: Path) -> str | None:
        return vbench.dimension_unavailable(dim.name, root)

    def refuse(meta: dict) -> str | None:
        return vbench.suite_reason(dim.name, meta.get("vbench"))

    # no compute: VBench scores every run at once in one subprocess (evaluate hands them to metrics.vbench)
    return MetricSpec(dim.name, "vbench", dim.description, _keys(dim.name), requires, precheck=precheck,
                      refuse=refuse, label=dim.label, column=100 + rank,
                      shown="scored" if dim.standard_only else "present")


_SPECS: tuple[MetricSpec, ...] = (*_IN_PROCESS, *(_vbench_spec(i, d) for i, d in enumerate(vbench.DIMENSIONS)))


def vbench_dimensions() -> tuple[str, ...]:
    return tuple(m.name for m in _SPECS if m.kind == "vbench")


def list_metrics() -> list[MetricSpec]:
    return list(_SPECS)


def find_metric(name: str) -> MetricSpec | None:
    return next((m for m in _SPECS if m.name == name), None)


def get_metric(name: str) -> MetricSpec:
    found = find_metric(name)
    if found is None:
        known = ", ".join(m.name for m in _SPECS)
        raise UserError(f"unknown metric {name!r} (known: {known})")
    return found


def default_metrics() -> tuple[str, ...]:
    """Everything: psnr, ssim, cosine, mse, lpips, adherence (tiny-shapes runs) and every VBench dimension."""
    return tuple(m.name for m in _SPECS)


__all__ = ["MetricInput", "MetricSpec", "against_baseline", "default_metrics", "find_metric", "get_metric",
           "list_metrics", "vbench_dimensions"]
