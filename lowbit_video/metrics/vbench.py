"""VBench dimensions, scored by the real `vbench` package (0.1.5) in a subprocess, offline.

Why a subprocess: vbench reads its cache folder into a module constant at import, edits `sys.path`,
configures logging, pins old numpy/transformers (we install it without its pins plus two small shims)
and, for any file it cannot find, shells out to `wget`. `lowbit_video.metrics.vbench_worker` isolates
all of that: it sets the weight folders and the offline flags before `import vbench`, blocks sockets and
downloaders, and runs `VBench(...).evaluate(..., local=True)`.

Two modes, as VBench has them. Free-text prompts are scored in `custom_input` mode, which refuses
six dimensions (STANDARD_ONLY: object_class, multiple_objects, color, spatial_relationship, scene,
appearance_style) because they need the auxiliary info (object names, colours, scenes, styles) of
VBench's own prompt suite. A run generated from that suite (`generate --prompts vbench[:<dim>]`)
records its suite entry in meta.json; those six are then scored in VBench's standard mode
(`vbench_standard`, reading VBench's own full-info entries for the run's prompt), for the
dimensions the suite lists the prompt under, as VBench's standard protocol does. The other ten are
scored in custom_input mode for every run: the same per-video functions, the prompt passed as is.

What VBench reads is each run's `video.mp4` (H.264; tiny-shapes frames are upscaled x8, nearest) - the
same file a person would look at. `temporal_flickering` needs no learned weights: it is VBench's formula
(255 - mean |f_t - f_{t+1}|) / 255 on the decoded mp4, without the official protocol's RAFT static-video
filter. Every other dimension is computed only when all its weight files are present and verified
(`lowbit_video.metrics.weights`); nothing is ever substituted or downloaded.

Per-video values follow VBench's reported scale: imaging_quality (MUSIQ, 0-100 per frame) is divided
by 100 as VBench does for its aggregate; dynamic_degree and human_action are 1.0 / 0.0 per video.

Values are floats or {"unavailable": "<one-line reason>"} - never NaN, never a traceback.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence


@dataclass(frozen=True)
class Dimension:
    """One VBench dimension: its column label, what it measures, the python modules it imports (beyond
    torch/torchvision/numpy and _COMMON_DEPS), whether VBench scores it only in standard mode, and
    whether `check-imports` fails when it does not import (core)."""

    name: str
    label: str
    description: str
    deps: tuple[str, ...] = ()
    standard_only: bool = False
    core: bool = False


# The dimensions VBench scores in `custom_input` mode (free-text prompts) first, then those
# `VBench.build_full_info_json(mode="custom_input")` rejects (vbench/__init__.py): they need VBench's
# own prompt suite with its auxiliary info (object names, colours, scenes, styles), and are scored in
# standard mode on runs whose prompt the suite lists for them.
DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("subject_consistency", "Subject",
              "VBench: DINO ViT-B/16 feature similarity to the first and previous frame", core=True),
    Dimension("background_consistency", "Background",
              "VBench: CLIP ViT-B/32 feature similarity to the first and previous frame", ("clip", "ftfy", "regex"),
              core=True),
    Dimension("temporal_flickering", "Flicker",
              "VBench formula, no static filter: (255 - mean |frame_t - frame_t+1|) / 255 on the mp4", core=True),
    Dimension("motion_smoothness", "Motion", "VBench: AMT-S frame-interpolation error of the odd frames",
              ("omegaconf", "yaml"), core=True),
    Dimension("dynamic_degree", "Dynamic", "VBench: RAFT optical flow says whether the video moves (1.0) or not (0.0)",
              ("easydict", "scipy"), core=True),
    Dimension("aesthetic_quality", "Aesthetic", "VBench: LAION aesthetic predictor on CLIP ViT-L/14 features, /10",
              ("clip", "ftfy", "regex"), core=True),
    Dimension("imaging_quality", "Imaging", "VBench: MUSIQ (SPAQ) per-frame quality, /100", ("pyiqa", "scipy", "yaml"),
              core=True),
    Dimension("human_action", "Action",
              "VBench: UMT Kinetics-400 top-5 contains the action named in the prompt (1.0/0.0)", ("timm", "einops")),
    Dimension("temporal_style", "T. style", "VBench: ViCLIP video-text similarity", ("einops", "ftfy", "regex", "timm")),
    Dimension("overall_consistency", "Overall", "VBench: ViCLIP video-text similarity",
              ("einops", "ftfy", "regex", "timm")),
    Dimension("object_class", "Object",
              "VBench standard mode (suite prompts): GRiT detects the prompted object, fraction of frames",
              ("detectron2",), standard_only=True),
    Dimension("multiple_objects", "Multi-obj",
              "VBench standard mode (suite prompts): GRiT detects both prompted objects, fraction of frames",
              ("detectron2",), standard_only=True),
    Dimension("color", "Color", "VBench standard mode (suite prompts): GRiT caption gives the object the prompted colour",
              ("detectron2",), standard_only=True),
    Dimension("spatial_relationship", "Spatial",
              "VBench standard mode (suite prompts): GRiT boxes in the prompted left/right/top/bottom relation",
              ("detectron2",), standard_only=True),
    Dimension("scene", "Scene",
              "VBench standard mode (suite prompts): Tag2Text caption names the prompted scene, fraction of frames",
              ("timm", "transformers"), standard_only=True),
    Dimension("appearance_style", "Style",
              "VBench standard mode (suite prompts): CLIP ViT-B/32 similarity to the prompted style, /100",
              ("clip", "ftfy", "regex"), standard_only=True),
)
CUSTOM_DIMENSIONS: tuple[str, ...] = tuple(d.name for d in DIMENSIONS if not d.standard_only)
STANDARD_ONLY: tuple[str, ...] = tuple(d.name for d in DIMENSIONS if d.standard_only)
VBENCH_DIMENSIONS: tuple[str, ...] = CUSTOM_DIMENSIONS + STANDARD_ONLY
CORE_DIMENSIONS: tuple[str, ...] = tuple(d.name for d in DIMENSIONS if d.core)
DESCRIPTIONS: dict[str, str] = {d.name: d.description for d in DIMENSIONS}

# `vbench` itself imports decord at import time; cv2 is used by the video readers.
_COMMON_DEPS: tuple[str, ...] = ("vbench", "decord", "cv2")
DIMENSION_DEPS: dict[str, tuple[str, ...]] = {d.name: d.deps for d in DIMENSIONS}

INSTALL_HINT = "scripts/install-vbench.sh"
WORKER_MODULE = "lowbit_video.metrics.vbench_worker"
TIMEOUT_ENV = "LOWBIT_VIDEO_VBENCH_TIMEOUT"


@dataclass(frozen=True)
class VBenchVideo:
    key: str          # caller's id for the video (e.g. the run dir); results are keyed by it
    mp4: Path         # the video VBench reads
    prompt: str       # its text prompt (used by human_action / temporal_style / overall_consistency)
    suite: dict | None = None  # its VBench suite entry (vbench_suite.suite_entry), if its prompt is one


def suite_reason(dim: str, suite: dict | None) -> str | None:
    """None when a run with this suite entry (None: a free-text prompt) can be scored on `dim`; else why not."""
    if dim not in STANDARD_ONLY:
        return None
    if not suite:
        return (f"VBench scores {dim} only in its standard mode, on its own prompts listed for it (this prompt is "
                f"not from VBench's suite: generate --prompts vbench:{dim})")
    if dim not in (suite.get("dimension") or ()):
        return f"VBench's suite does not list this prompt for {dim} (it does for {', '.join(suite.get('dimension') or ())})"
    return None


def unavailable(reason: str) -> dict[str, str]:
    """The value of a metric that could not be computed: {"unavailable": "<one line>"}."""
    line = " ".join(str(reason).split()) or "unknown error"
    return {"unavailable": line[:400]}


def _missing_modules(mods: Sequence[str]) -> list[str]:
    missing = []
    for mod in mods:
        try:
            if importlib.util.find_spec(mod) is None:
                missing.append(mod)
        except (ImportError, ValueError):
            missing.append(mod)
    return missing


def _weights_reason(dim: str, root: Path, allow_unverified: bool) -> str | None:
    from dataclasses import replace

    from . import weights

    manifest = weights.MANIFEST
    if allow_unverified:
        # Random-weight smoke tests only (never set by the CLI): files must still exist under their real
        # names, but their hash and size are not checked.
        manifest = tuple(replace(w, sha256=None, size=None) for w in manifest)
    return weights.missing_for(dim, root, manifest)


def dimension_unavailable(dim: str, root: str | os.PathLike, *, allow_unverified_weights: bool = False) -> str | None:
    """None when `dim` can be scored with the weights under `root` and the installed packages; else a
    one-line reason (missing python packages, missing/bad weight files). Whether a run's prompt allows
    a STANDARD_ONLY dimension is `suite_reason`'s question.

    `allow_unverified_weights` accepts weight files whose hash or size does not match the manifest. It
    exists for the random-weight smoke tests of the real code paths; the CLI never sets it.
    """
    if dim not in VBENCH_DIMENSIONS:
        return f"unknown VBench dimension {dim!r}"
    missing = _missing_modules(_COMMON_DEPS + DIMENSION_DEPS[dim])
    if missing:
        return f"missing python packages: {', '.join(missing)} (install the VBench stack: {INSTALL_HINT})"
    return _weights_reason(dim, Path(root), allow_unverified_weights)


def _default_timeout(n_videos: int, n_dims: int) -> float:
    env = os.environ.get(TIMEOUT_ENV)
    if env:
        try:
            return float(env)
        except ValueError:
            pass
    return 300.0 + 120.0 * max(1, n_videos) * max(1, n_dims)


def _error_line(stderr: str) -> str:
    """The most informative single line of a worker's stderr: the last exception line if any."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Interrupt", "Exit")) and " " not in head:
            return ln
    return lines[-1] if lines else "no error output"


def _clean(value: Any) -> float | dict:
    if isinstance(value, dict) and "unavailable" in value:
        return unavailable(value["unavailable"])
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        v = float(value)
        return v if math.isfinite(v) else unavailable(f"non-finite score ({v})")
    return unavailable(f"unexpected VBench result {str(value)[:80]!r}")


def score_videos(
    videos: Sequence[VBenchVideo],
    dimensions: Sequence[str],
    root: str | os.PathLike,
    *,
    timeout: float | None = None,
    device: str | None = None,
    allow_unverified_weights: bool = False,
) -> dict[str, dict[str, float | dict]]:
    """Score every video on every dimension: {video.key: {dim: float | {"unavailable": reason}}}.

    Dimensions that cannot run (see `dimension_unavailable`) and STANDARD_ONLY dimensions of videos
    whose suite entry does not list them (`suite_reason`) are reported without starting anything;
    the rest run in ONE worker subprocess for all videos. A worker crash or timeout becomes
    {"unavailable": "<one line>"} for each affected video and dimension.
    """
    root = Path(root).expanduser().resolve()
    dims = list(dict.fromkeys(dimensions))
    keys = [v.key for v in videos]
    if len(set(keys)) != len(keys):
        raise ValueError("VBenchVideo keys must be unique")
    results: dict[str, dict[str, float | dict]] = {v.key: {} for v in videos}

    cannot = {d: dimension_unavailable(d, root, allow_unverified_weights=allow_unverified_weights) for d in dims}
    todo, wanted = [], {}
    for v in videos:
        mp4 = Path(v.mp4)
        wanted[v.key] = []
        for dim in dims:
            why = (suite_reason(dim, v.suite) or cannot[dim]
                   or (None if mp4.is_file() else f"no video file {mp4.name}"))
            if why is None:
                wanted[v.key].append(dim)
            else:
                results[v.key][dim] = unavailable(why)
        if wanted[v.key]:
            todo.append(v)

    dims_todo = [d for d in dims if any(d in wanted[v.key] for v in todo)]
    if dims_todo:
        worker = _run_worker(todo, dims_todo, root, timeout=timeout, device=device)
        for v in todo:
            for dim in wanted[v.key]:
                if "error" in worker:
                    results[v.key][dim] = unavailable(worker["error"])
                else:
                    value = worker["scores"].get(v.key, {}).get(dim)
                    results[v.key][dim] = (_clean(value) if value is not None
                                           else unavailable("VBench returned no score for this video"))
    # keep the caller's dimension order
    return {k: {d: r[d] for d in dims} for k, r in results.items()}


def _run_worker(videos: Sequence[VBenchVideo], dims: Sequence[str], root: Path, *,
                timeout: float | None, device: str | None) -> dict:
    """Run the worker once; returns its output dict, or {"error": "<one line>"}."""
    limit = timeout if timeout is not None else _default_timeout(len(videos), len(dims))
    with tempfile.TemporaryDirectory(prefix="lowbit-vbench-") as tmp:
        req = Path(tmp) / "request.json"
        out = Path(tmp) / "result.json"
        req.write_text(json.dumps({
            "root": str(root),
            "dimensions": list(dims),
            "videos": [{"key": v.key, "mp4": str(Path(v.mp4).resolve()), "prompt": v.prompt, "suite": v.suite}
                       for v in videos],
            "device": device,
        }))
        env = dict(os.environ)
        env.update({
            "VBENCH_CACHE_DIR": str(root / "vbench"),   # the worker re-points it at its overlay of this
            "TORCH_HOME": str(root / "torch"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        })
        cmd = [sys.executable, "-m", WORKER_MODULE, "--request", str(req), "--output", str(out)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return {"error": f"VBench worker timed out after {limit:.0f} s (set {TIMEOUT_ENV} to allow longer)"}
        except OSError as exc:
            return {"error": f"could not start the VBench worker: {exc}"}
        if proc.returncode != 0 or not out.is_file():
            return {"error": f"VBench worker failed (exit {proc.returncode}): {_error_line(proc.stderr)}"}
        try:
            data = json.loads(out.read_text())
        except ValueError as exc:
            return {"error": f"VBench worker wrote unreadable output: {exc}"}
        if not isinstance(data, dict) or not isinstance(data.get("scores"), dict):
            return {"error": "VBench worker wrote no scores"}
        return data
