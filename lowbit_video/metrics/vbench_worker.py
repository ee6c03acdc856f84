"""Subprocess entry point that runs the real VBench (0.1.5) offline.

    python -m lowbit_video.metrics.vbench_worker --request REQ.json --output OUT.json

REQ.json: {"root": weights root, "dimensions": [...], "videos": [{"key", "mp4", "prompt", "suite"}],
           "device": null|str}   ("suite": the run's VBench suite entry or null)
OUT.json: {"scores": {key: {dim: float | {"unavailable": reason}}}, "aggregates": {dim: float|null},
           "seconds": {dim: s}, "versions": {...}, "device": str}

Order matters, hence this module imports nothing heavy at top level:
1. environment: VBENCH_CACHE_DIR (read by vbench.utils at import), TORCH_HOME, HF_HUB_OFFLINE,
   TRANSFORMERS_OFFLINE - all before `import vbench`;
2. offline guard: socket connections and DNS lookups raise; `wget`/`git`/`curl` subprocesses (VBench's
   fallback for a missing file) raise instead of downloading;
3. compat shims for a modern stack: openai-clip 1.0.1 does `from pkg_resources import packaging`
   (pkg_resources is gone from setuptools >= 81), UMT imports `numpy.lib.function_base` (gone in numpy 2);
4. VBench's cache folder is a private overlay of <root>/vbench (symlinks), so nothing is written into the
   weights root and two fixed-up entries can be added without touching it: VBench's existence check of
   dino_model/dino_vitbase16_pretrain.pth (the weights themselves load from
   $TORCH_HOME/hub/checkpoints/) and ViCLIP's BPE vocabulary (the identical file ships in openai-clip);
5. videos are symlinked as `<prompt>-<i>.mp4` (VBench's naming; human_action reads its label from it) and
   every prompt is passed explicitly through a dict `prompt_list`;
6. `VBench(device, full_info, out).evaluate(dir, name, prompt_list=..., dimension_list=[dim], local=True,
   mode="custom_input")`, one dimension at a time so one failing dimension does not lose the others;
7. the dimensions VBench scores only on its own suite (vbench.STANDARD_ONLY) run in `vbench_standard`
   mode on the videos whose request entry carries a suite entry listing them: linked as
   `<prompt>-<i>.mp4` (i < 5, as VBench looks for them; more videos of a prompt go to another
   round), with VBench's own full-info entries of those prompts as the full-info file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import traceback
import types
from pathlib import Path

from .vbench import CORE_DIMENSIONS, STANDARD_ONLY

BLOCKED_PROGRAMS = {"wget", "curl", "git", "unzip"}
VIDEOS_PER_PROMPT = 5  # VBench's standard mode looks for <prompt>-0.mp4 ... <prompt>-4.mp4


class NetworkBlocked(OSError):
    pass


def set_environment(root: Path, cache_dir: Path) -> None:
    os.environ["VBENCH_CACHE_DIR"] = str(cache_dir)
    os.environ["TORCH_HOME"] = str(root / "torch")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HOME", str(root / "huggingface"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def block_network() -> None:
    """Make every network access fail loudly in this process (and VBench's wget/git fallbacks)."""
    import socket
    import subprocess

    def _refuse(*args, **kwargs):
        raise NetworkBlocked("network access is disabled: VBench runs offline (weights are never downloaded)")

    socket.socket.connect = _refuse            # type: ignore[method-assign]
    socket.socket.connect_ex = _refuse         # type: ignore[method-assign]
    socket.getaddrinfo = _refuse               # type: ignore[assignment]
    socket.create_connection = _refuse         # type: ignore[assignment]

    def _guard(cmd):
        argv0 = cmd[0] if isinstance(cmd, (list, tuple)) and cmd else str(cmd).split()[0] if cmd else ""
        if os.path.basename(str(argv0)) in BLOCKED_PROGRAMS:
            raise NetworkBlocked(f"download blocked: VBench tried to run {' '.join(map(str, cmd))[:200]} "
                                 "(a weight file is missing)")

    orig_run, orig_popen_init = subprocess.run, subprocess.Popen.__init__

    def run(cmd, *a, **k):
        _guard(cmd)
        return orig_run(cmd, *a, **k)

    def popen_init(self, cmd, *a, **k):
        _guard(cmd)
        return orig_popen_init(self, cmd, *a, **k)

    subprocess.run = run                       # type: ignore[assignment]
    subprocess.Popen.__init__ = popen_init     # type: ignore[method-assign]


def apply_shims() -> None:
    """Compat shims for openai-clip (pkg_resources.packaging) and UMT (numpy.lib.function_base)."""
    try:
        import pkg_resources  # noqa: F401  (old setuptools still has it, with .packaging)
    except ImportError:
        import packaging
        import packaging.version
        sys.modules["pkg_resources"] = types.SimpleNamespace(packaging=packaging)  # type: ignore[assignment]
    try:
        import numpy.lib.function_base  # noqa: F401
    except ImportError:
        sys.modules["numpy.lib.function_base"] = types.SimpleNamespace(disp=print)  # type: ignore[assignment]


def build_cache_overlay(root: Path, cache_dir: Path) -> None:
    """`cache_dir` mirrors <root>/vbench with symlinks (plus the two derived entries, see module doc)."""
    src = root / "vbench"
    cache_dir.mkdir(parents=True, exist_ok=True)
    special = {"dino_model", "ViCLIP"}
    if src.is_dir():
        for entry in src.iterdir():
            if entry.name not in special:
                (cache_dir / entry.name).symlink_to(entry.resolve())
    for name in special:
        (cache_dir / name).mkdir(exist_ok=True)
        if (src / name).is_dir():
            for entry in (src / name).iterdir():
                (cache_dir / name / entry.name).symlink_to(entry.resolve())
    dino_ckpt = cache_dir / "dino_model" / "dino_vitbase16_pretrain.pth"
    hub_ckpt = root / "torch" / "hub" / "checkpoints" / "dino_vitbase16_pretrain.pth"
    if not dino_ckpt.exists() and hub_ckpt.is_file():
        dino_ckpt.symlink_to(hub_ckpt.resolve())
    bpe = cache_dir / "ViCLIP" / "bpe_simple_vocab_16e6.txt.gz"
    if not bpe.exists():
        try:
            import importlib.util
            spec = importlib.util.find_spec("clip")
            if spec and spec.origin:
                packaged = Path(spec.origin).parent / "bpe_simple_vocab_16e6.txt.gz"
                if packaged.is_file():
                    bpe.symlink_to(packaged)
        except (ImportError, ValueError, OSError):
            pass


def _safe_stem(prompt: str, limit: int = 150) -> str:
    stem = "".join("_" if c in "/\\\0\n\r\t" else c for c in prompt).strip() or "video"
    while len(stem.encode()) > limit:
        stem = stem[:-1]
    return stem


def layout_videos(videos: list[dict], video_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Link each mp4 as `<prompt>-<i>.mp4`; returns (filename -> prompt, filename -> key)."""
    video_dir.mkdir(parents=True, exist_ok=True)
    prompts, keys = {}, {}
    for i, v in enumerate(videos):
        name = f"{_safe_stem(v['prompt'])}-{i}.mp4"
        target = video_dir / name
        try:
            target.symlink_to(Path(v["mp4"]).resolve())
        except OSError:
            shutil.copyfile(v["mp4"], target)
        prompts[name] = v["prompt"]
        keys[name] = v["key"]
    return prompts, keys


def per_video_value(dim: str, value):
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        v = float(value)
        if dim == "imaging_quality":      # MUSIQ is 0-100 per frame; VBench reports /100
            v /= 100.0
        return v if math.isfinite(v) else {"unavailable": f"non-finite score ({v})"}
    return {"unavailable": f"unexpected VBench result {str(value)[:80]!r}"}


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def standard_rounds(videos: list[dict], dim: str) -> list[list[tuple[str, dict]]]:
    """The videos whose suite entry lists `dim`, named as VBench's standard mode looks for them,
    `<prompt>-<i>.mp4` with i < VIDEOS_PER_PROMPT; more videos of one prompt go to further rounds
    (separate evaluations), so none is left out."""
    per_prompt: dict[str, list[dict]] = {}
    for v in videos:
        suite = v.get("suite") or {}
        if dim in (suite.get("dimension") or ()):
            per_prompt.setdefault(suite.get("prompt_en") or v["prompt"], []).append(v)
    rounds: list[list[tuple[str, dict]]] = []
    for prompt, vs in per_prompt.items():
        for i, v in enumerate(vs):
            r, idx = divmod(i, VIDEOS_PER_PROMPT)
            while len(rounds) <= r:
                rounds.append([])
            rounds[r].append((f"{prompt}-{idx}.mp4", v))
    return rounds


def _evaluate_standard(VBench, load_json, device: str, dim: str, videos: list[tuple[str, dict]], index: int,
                       work: Path) -> tuple[list, dict[str, str]]:
    """One `vbench_standard` evaluation of `dim` over one round: VBench's own full-info entries of
    these prompts (cut from VBench_full_info.json to them, so no other prompt counts as missing).
    Returns (VBench's [aggregate, per-video results], file name -> video key)."""
    import torch

    from ..vbench_suite import entries_for

    folder = work / f"standard-{dim}-{index}"
    folder.mkdir(parents=True)
    names = {}
    for name, v in videos:
        if Path(name).name != name or "\0" in name:
            raise ValueError(f"VBench names videos after their prompt, and {name!r} is no file name")
        (folder / name).symlink_to(Path(v["mp4"]).resolve())
        names[name] = v["key"]
    prompts = [(v.get("suite") or {}).get("prompt_en") or v["prompt"] for _, v in videos]
    info = work / f"standard-{dim}-{index}-full_info.json"
    info.write_text(json.dumps(entries_for(prompts, dim)))
    run_name = f"lowbit_{dim}_standard_{index}"
    bench = VBench(torch.device(device), str(info), str(work / "out"))
    bench.evaluate(str(folder), run_name, dimension_list=[dim], local=True, read_frame=False, mode="vbench_standard")
    return load_json(str(work / "out" / f"{run_name}_eval_results.json"))[dim], names


def run(request: dict) -> dict:
    root = Path(request["root"]).resolve()
    dims: list[str] = list(request["dimensions"])
    videos: list[dict] = list(request["videos"])
    with tempfile.TemporaryDirectory(prefix="lowbit-vbench-work-") as tmp:
        work = Path(tmp)
        cache = work / "vbench-cache"
        set_environment(root, cache)
        block_network()
        apply_shims()
        build_cache_overlay(root, cache)
        prompts, keys = layout_videos(videos, work / "videos")

        import importlib
        import torch
        import vbench
        from vbench import VBench
        from vbench.utils import load_json

        device = request.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        full_info = Path(vbench.__file__).parent / "VBench_full_info.json"
        bench = VBench(torch.device(device), str(full_info), str(work / "out"))

        scores: dict[str, dict] = {v["key"]: {} for v in videos}
        aggregates: dict[str, float | None] = {}
        seconds: dict[str, float] = {}
        import time
        for dim in dims:
            start = time.perf_counter()
            standard = dim in STANDARD_ONLY
            rounds = standard_rounds(videos, dim) if standard else []
            eligible = [v["key"] for r in rounds for _, v in r] if standard else list(scores)
            try:
                importlib.import_module(f"vbench.{dim}")
                if standard:
                    results = [_evaluate_standard(VBench, load_json, device, dim, r, i, work)
                               for i, r in enumerate(rounds)]
                else:
                    name = f"lowbit_{dim}"
                    bench.evaluate(str(work / "videos"), name, prompt_list=dict(prompts), dimension_list=[dim],
                                   local=True, read_frame=False, mode="custom_input")
                    results = [(load_json(str(work / "out" / f"{name}_eval_results.json"))[dim], keys)]
            except BaseException as exc:  # noqa: BLE001 - one failing dimension must not lose the others
                if isinstance(exc, KeyboardInterrupt):
                    raise
                traceback.print_exc(file=sys.stderr)
                reason = one_line(exc)
                for key in eligible:
                    scores[key][dim] = {"unavailable": f"VBench {dim} failed: {reason}"}
                continue
            finally:
                seconds[dim] = round(time.perf_counter() - start, 3)
            agg = results[0][0][0] if len(results) == 1 else None  # VBench's own aggregate of one evaluation
            aggregates[dim] = float(agg) if isinstance(agg, (int, float)) and math.isfinite(agg) else None
            for (_, per_video), names in results:
                for item in per_video:
                    key = names.get(Path(item["video_path"]).name)
                    if key is not None:
                        scores[key][dim] = per_video_value(dim, item["video_results"])
            for key in eligible:   # VBench silently skips a video it cannot decode (temporal_flickering)
                scores[key].setdefault(dim, {"unavailable": "VBench could not read this video"})

    from importlib.metadata import PackageNotFoundError, version
    versions = {}
    for dist in ("vbench", "torch", "numpy", "decord", "pyiqa", "openai-clip", "timm", "opencv-python-headless"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return {"scores": scores, "aggregates": aggregates, "seconds": seconds, "versions": versions,
            "device": device}


def check_imports(dims: list[str]) -> int:
    """Import vbench and each dimension's module the way `run` does (shims, offline guard); report each.
    Exit status 1 when a core dimension does not import."""
    import importlib

    failed = []
    with tempfile.TemporaryDirectory(prefix="lowbit-vbench-check-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        set_environment(root, Path(tmp) / "vbench-cache")
        block_network()
        apply_shims()
        build_cache_overlay(root, Path(tmp) / "vbench-cache")
        real_stdout, sys.stdout = sys.stdout, sys.stderr
        try:
            importlib.import_module("vbench")
            results = []
            for dim in dims:
                try:
                    importlib.import_module(f"vbench.{dim}")
                    if dim == "imaging_quality":
                        importlib.import_module("pyiqa.archs.musiq_arch")
                    results.append(f"ok    {dim}")
                except Exception as exc:  # noqa: BLE001
                    failed.append(dim)
                    results.append(f"FAIL  {dim}: {one_line(exc)}")
        except Exception as exc:  # noqa: BLE001
            results, failed = [f"FAIL  import vbench: {one_line(exc)}"], list(dims)
        finally:
            sys.stdout = real_stdout
    print("\n".join(results))
    return 1 if set(failed) & set(CORE_DIMENSIONS) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbit_video.metrics.vbench_worker")
    ap.add_argument("--request", help="request JSON file")
    ap.add_argument("--output", help="where to write the result JSON (default: stdout)")
    ap.add_argument("--check", action="store_true", help="only check that the VBench dimension modules import")
    args = ap.parse_args(argv)
    if args.check:
        from .vbench import VBENCH_DIMENSIONS
        return check_imports(list(VBENCH_DIMENSIONS))
    if not args.request:
        ap.error("--request is required")
    request = json.loads(Path(args.request).read_text())
    real_stdout = sys.stdout
    sys.stdout = sys.stderr            # VBench prints progress; keep stdout for our JSON
    try:
        data = run(request)
    finally:
        sys.stdout = real_stdout
    text = json.dumps(data)
    if args.output:
        tmp = Path(args.output).with_suffix(".part")
        tmp.write_text(text)
        os.replace(tmp, args.output)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
