"""`lowbit-video evaluate`: score runs and store the scores beside them, in `<run>/metrics.json`.

* **What is scored.** The asked metrics (default: all of `metrics.registry`, each where its spec
  applies: adherence only on tiny-shapes runs); each is computed by its spec (`compute`, or the one
  VBench subprocess for the VBench dimensions). Paired metrics compare a run's exact frames
  (frames.npz) with its *baseline*: the complete run with recipe == `baseline` (default fp16) and the
  same model, prompt, seed, steps, guidance and size (runstore.find_baseline: beside the run, then
  among the other runs given). The baseline run itself gets paired metrics {"unavailable": "baseline run"}.
* **Values** are floats or {"unavailable": "<one-line reason>"} -- missing weights or packages, no
  baseline, a non-finite score -- never NaN and never a score from substitute weights.
* **Atomic, resumable, incremental.** metrics.json is written with runstore.atomic_write_json, so an
  interrupted evaluate leaves the previous file or none, never half of one. Each run's in-process
  metrics are written as soon as they are computed; VBench dimensions (one subprocess for all runs)
  are merged in afterwards. A run is skipped when its file already has every asked metric for the
  same run frames and the same baseline frames (frames_sha256 of both); new metrics are merged into
  the file; paired metrics against a baseline whose frames changed are dropped and recomputed.
  A metric stored as unavailable because a requirement was missing (recorded under "prechecks") is
  recomputed once the requirement's state changes (e.g. its weights were added); --overwrite
  recomputes every asked metric.
* **Nothing destroyed, nothing silent.** A `baseline` that is neither a known recipe nor the recipe
  of any run found is a UserError before anything is read or written. Every run folder to be written
  is checked for writability first (UserError naming it). Paired scores stored against a baseline
  that cannot be found now are kept as they are (a score is never replaced by "unavailable" that
  could not be recomputed), with a counted warning. A run whose frames (or whose baseline's frames)
  are damaged, or whose meta.json is, gets status "damaged" with the reason, keeps its metrics.json
  untouched, and the other runs are scored; warnings go to `EvalReporter.warning`.
* **Concurrent evaluates** on one folder never score a run twice: each run is claimed
  (runstore.claim_run) while it is scored; a run claimed by another process is left to it
  (status "claimed"). A claim dies with its process.
* **Many processes.** Under `torchrun` (or `--shard i/n`, `shard=`) each process scores only its
  share of the runs (distributed.shard_runs, keyed like generate's grid, so a rank scores the runs
  it generated); each writes its runs' files itself. Under torchrun every rank then waits for the
  others and returns every run. Paired metrics read the baseline's frames whoever owns it.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from . import runstore
from .errors import UserError

FORMAT = "lowbit-video metrics"
FORMAT_VERSION = 1
METRICS_NAME = "metrics.json"
BASELINE_RUN = "baseline run"


def no_baseline_reason(baseline: str) -> str:
    return f"no {baseline} run of the same model, prompt, seed and steps"


class EvalReporter:
    """Progress hooks (no-ops here but `warning`, which collects; the CLI draws progress on stderr)."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, text: str) -> None:
        self.warnings.append(text)

    def planned(self, runs: list[Path], todo: int) -> None: ...
    def run_started(self, run: Path, metrics: list[str]) -> None: ...
    def run_done(self, run: Path, status: str) -> None: ...
    def vbench_started(self, n_videos: int, dimensions: list[str]) -> None: ...
    def vbench_done(self, seconds: float) -> None: ...


@dataclass
class _Job:
    run: runstore.RunRecord
    baseline: Path | None
    is_baseline: bool
    metrics: list[str]
    values: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    prechecks: dict = field(default_factory=dict)
    todo: list[str] = field(default_factory=list)
    created: str | None = None
    status: str = "skipped"
    kept_baseline: dict | None = None   # the stored baseline record of paired scores kept (no baseline now)
    error: str | None = None            # status "damaged": why

    @property
    def dir(self) -> Path:
        return self.run.dir

    @property
    def meta(self) -> dict:
        return self.run.meta


# -------------------------------------------------------------------------------------- inputs


def resolve_metrics(names: Sequence[str] | None) -> tuple[list[str], bool]:
    """(metric names, explicit?) -- names may be repeated or comma lists; None/empty -> the defaults."""
    from .metrics.registry import default_metrics, get_metric

    flat = [n.strip() for item in (names or []) for n in str(item).split(",") if n.strip()]
    if not flat:
        return list(default_metrics()), False
    return [get_metric(n).name for n in OrderedDict.fromkeys(flat)], True


def find_runs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Complete runs at or under each path (deduplicated, in order); UserError if a path has none."""
    return runstore.find_runs(paths)


# ---------------------------------------------------------------------------------- prechecks


class _Prechecks:
    """Why a metric cannot be computed for a run before computing anything (None: it can).
    Weight and package checks are done once per evaluate call."""

    def __init__(self, root: Path, baseline: str) -> None:
        self.root, self.baseline = root, baseline
        self._cache: dict[str, str | None] = {}

    def _once(self, spec) -> str | None:
        if spec.name not in self._cache:
            self._cache[spec.name] = metric_unavailable(spec, self.root)
        return self._cache[spec.name]

    def reason(self, name: str, job: _Job) -> str | None:
        from .metrics.registry import get_metric
        spec = get_metric(name)
        if spec.paired:
            if job.is_baseline:
                return BASELINE_RUN
            if job.baseline is None:
                return no_baseline_reason(self.baseline)
        if not spec.applies_to(job.run.model, job.run.family):
            return f"{name} scores {', '.join(spec.models)} runs only (this run: {job.run.model})"
        return (spec.refuse(job.meta) if spec.refuse else None) or self._once(spec)


def metric_unavailable(spec, root: Path) -> str | None:
    """Why `spec` cannot be computed with the packages installed and the weights under `root`, or None."""
    return spec.precheck(root) if spec.precheck else None


# ---------------------------------------------------------------------------------- computing


def clean_value(v: Any) -> float | dict:
    """A float, or {"unavailable": reason}; NaN/Inf and non-numbers become unavailable."""
    if isinstance(v, dict):
        return {"unavailable": str(v.get("unavailable", "no score")).splitlines()[0] or "no score"}
    try:
        f = float(v)
    except (TypeError, ValueError):
        return {"unavailable": f"not a number ({type(v).__name__})"}
    return f if math.isfinite(f) else {"unavailable": f"non-finite score ({f})"}


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


class _Frames:
    """Frames of runs, loaded once (baselines are shared by every recipe)."""

    def __init__(self) -> None:
        self._cache: dict[Path, Any] = {}

    def __call__(self, run: Path):
        if run not in self._cache:
            from .errors import DamagedRunError
            from .generate import load_run_frames

            if len(self._cache) > 16:
                self._cache.clear()
            try:
                self._cache[run] = load_run_frames(run)[0]
            except DamagedRunError as e:
                self._cache[run] = e  # a damaged baseline is reported once per run that needs it, read once
        got = self._cache[run]
        if isinstance(got, Exception):
            raise got
        return got


def _compute_local(job: _Job, name: str, frames: _Frames, root: Path) -> None:
    """Compute one in-process metric (its spec's compute) into job.values / job.details."""
    from .errors import DamagedRunError
    from .metrics.registry import MetricInput, get_metric

    inp = MetricInput(frames=lambda: frames(job.dir), baseline_frames=lambda: frames(job.baseline),
                      prompt=str(job.meta.get("prompt", "")), weights_root=root)
    try:
        value, details = get_metric(name).compute(inp)
        if details:
            job.details[name] = details
    except DamagedRunError:
        raise  # the whole run is reported as damaged, not one metric
    except (ValueError, RuntimeError, OSError, KeyError) as e:
        value = {"unavailable": _one_line(e)}
    job.values[name] = clean_value(value)


def _run_vbench(jobs: list[tuple[_Job, list[str]]], root: Path, rep: EvalReporter) -> None:
    from .metrics import vbench

    videos, keyed = [], {}
    for job, dims in jobs:
        mp4 = job.dir / "video.mp4"
        if not mp4.is_file():
            for d in dims:
                job.values[d] = {"unavailable": "run has no video.mp4"}
            continue
        keyed[str(job.dir)] = (job, dims)
        videos.append(vbench.VBenchVideo(key=str(job.dir), mp4=mp4, prompt=str(job.meta.get("prompt", "")),
                                      suite=job.meta.get("vbench")))
    if not videos:
        return
    dims_all = list(OrderedDict.fromkeys(d for _, ds in keyed.values() for d in ds))
    rep.vbench_started(len(videos), dims_all)
    t0 = time.perf_counter()
    try:
        result = vbench.score_videos(videos, dims_all, root)
        failure = None
    except Exception as e:  # noqa: BLE001 - any failure of the subprocess makes these scores unavailable
        result, failure = {}, f"vbench failed: {_one_line(e)}"
    rep.vbench_done(time.perf_counter() - t0)
    for key, (job, dims) in keyed.items():
        scores = result.get(key, {}) if isinstance(result, dict) else {}
        for d in dims:
            job.values[d] = clean_value(scores.get(d, {"unavailable": failure or "vbench returned no score"}))


# ------------------------------------------------------------------------------------ the file


def _read_existing(run: Path) -> dict | None:
    try:
        data = json.loads((run / METRICS_NAME).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("metrics"), dict):
        return None
    return data


def _metric_order(names) -> list[str]:
    from .metrics.registry import list_metrics

    order = {m.name: i for i, m in enumerate(list_metrics())}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def _versions() -> dict:
    from importlib import metadata
    import platform

    from . import __version__

    def v(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"lowbit_video": __version__, "numpy": v("numpy"), "scikit-image": v("scikit-image"), "torch": v("torch"),
            "lpips": v("lpips"), "vbench": v("vbench"), "python": platform.python_version()}


def _run_block(run: runstore.RunRecord) -> dict:
    m = run.meta
    return {"model": run.model, "recipe": run.recipe, "prompt": m.get("prompt"),
            "seed": m.get("seed"), "steps": m.get("steps"), "frames_sha256": m.get("frames_sha256")}


def _document(job: _Job, baseline_name: str, root: Path) -> dict:
    base = job.kept_baseline
    if job.baseline is not None:
        bm = runstore.read_meta(job.baseline) or {}
        base = {"recipe": baseline_name, "dir": os.path.relpath(job.baseline, runstore.output_root(job.dir)),
                "frames_sha256": bm.get("frames_sha256")}
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    names = _metric_order(job.values)
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "run": _run_block(job.run),
        "baseline": base,
        "metrics": {n: job.values[n] for n in names},
        "details": {n: job.details[n] for n in _metric_order(job.details) if n in job.values},
        "prechecks": {n: job.prechecks[n] for n in _metric_order(job.prechecks) if n in job.values},
        "weights_root": str(root),
        "created": job.created or now, "updated": now,
        "versions": _versions(),
    }


def _plan(job: _Job, existing: dict | None, baseline_sha: str | None, checks: _Prechecks, overwrite: bool) -> None:
    """Fill job.values/details/prechecks from the existing file (dropping stale entries) and job.todo."""
    from .metrics.registry import find_metric, get_metric

    if existing is not None and (existing.get("run") or {}).get("frames_sha256") == job.meta.get("frames_sha256"):
        job.created = existing.get("created")
        old_base = (existing.get("baseline") or {}).get("frames_sha256") if existing.get("baseline") else None
        stale_paired = old_base != baseline_sha
        if job.baseline is None and not job.is_baseline and isinstance(existing.get("baseline"), dict):
            # scored against a baseline that cannot be found now: keep those scores, never recompute
            # them to "unavailable"
            job.kept_baseline, stale_paired = existing["baseline"], False
        for store, src in ((job.values, "metrics"), (job.details, "details"), (job.prechecks, "prechecks")):
            for n, v in (existing.get(src) or {}).items():
                spec = find_metric(n)  # None: a metric this version no longer knows, kept as is
                if not (spec is not None and spec.paired and stale_paired):
                    store[n] = v
    for n in job.metrics:
        if job.kept_baseline is not None and n in job.values and get_metric(n).paired:
            continue  # kept: its baseline is not here to recompute it (even with overwrite)
        if overwrite or n not in job.values:
            job.todo.append(n)
            continue
        stored_unavailable = isinstance(job.values[n], dict)
        if stored_unavailable:
            now = checks.reason(n, job)
            before = job.prechecks.get(n)
            if (n in job.prechecks and now != before) or (n not in job.prechecks and now is not None):
                job.todo.append(n)


def evaluate_runs(run_dirs: Sequence[str | os.PathLike], metrics: Sequence[str] | None = None,
                  weights_dir: str | None = None, baseline: str = "fp16", overwrite: bool = False,
                  reporter: EvalReporter | None = None, shard: Any = None) -> list[dict]:
    """Score runs at or under `run_dirs`; write each run's metrics.json; return the documents (+ "dir",
    "status": "scored" | "skipped" | "other-shard").

    `shard`: "i/n" or a distributed.ShardSpec -- score only this shard's runs; None: torchrun's
    RANK / WORLD_SIZE when launched, else every run. The runs found are split with
    distributed.shard_runs keyed by (model, recipe, prompt, seed), the same split generate makes of
    the same grid, and independent of what is already scored (so concurrent shards agree). Under
    torchrun the ranks wait for each other and every rank returns every run with its real status;
    with --shard i/n (no process group) the other shards' runs come back as "other-shard" with
    their metrics.json as it is now (or no metrics)."""
    from . import distributed

    spec = shard if isinstance(shard, distributed.ShardSpec) else distributed.ShardSpec.from_cli_or_env(shard)
    with distributed.process_group(spec):
        return _evaluate(run_dirs, metrics, weights_dir, baseline, overwrite, reporter, spec)


def _job_key(job: "_Job") -> tuple:
    from .distributed import run_key

    try:
        return run_key(job.meta)
    except (KeyError, TypeError, ValueError):
        return ("?", "?", str(job.dir), 0)  # a meta.json without the usual keys: keyed by its folder


def _check_baseline(baseline: str, runs: Sequence[runstore.RunRecord]) -> None:
    """A baseline that is no known recipe and no run's recipe is a typo: refuse before any write."""
    from .recipes import available_recipes

    found = list(OrderedDict.fromkeys(str(r.recipe) for r in runs if r.recipe))
    if baseline in found or baseline in available_recipes():
        return
    raise UserError(f"--baseline {baseline}: no such recipe and no run of it among the runs found "
                    f"(recipes found: {', '.join(found) or 'none'})")


def _check_writable(jobs: list["_Job"]) -> None:
    bad = [(j.dir, why) for j in jobs if (why := runstore.output_problem(j.dir, is_dir=True))]
    if bad:
        more = f" (and {len(bad) - 1} more run folders)" if len(bad) > 1 else ""
        raise UserError(f"{bad[0][0]}: {bad[0][1]}; metrics.json cannot be written{more}")


def _damaged_result(run: Path, error: str, meta: dict | None = None) -> dict:
    """A damaged run's entry: its metrics.json as it stands (untouched), else no metrics."""
    doc = _read_existing(run) or {"format": FORMAT, "format_version": FORMAT_VERSION,
                                  "run": _run_block(runstore.RunRecord.of(run, meta or {})),
                                  "baseline": None, "metrics": {}, "details": {}, "prechecks": {}}
    return {**doc, "dir": str(run), "status": "damaged", "error": error}


def _score(job: "_Job", checks: "_Prechecks", frames: "_Frames", root: Path) -> list[str]:
    """Compute the job's in-process metrics (DamagedRunError propagates); return its VBench dimensions."""
    from .metrics.registry import get_metric

    vdims = []
    for n in job.todo:
        job.details.pop(n, None)
        why = checks.reason(n, job)
        if why is not None:
            job.values[n] = {"unavailable": why}
            job.prechecks[n] = why
            continue
        job.prechecks.pop(n, None)
        if get_metric(n).compute is None:  # scored with every run at once (VBench)
            vdims.append(n)
            job.values.pop(n, None)
        else:
            _compute_local(job, n, frames, root)
    return vdims


# ------------------------------------------------------------------------ plan, score, aggregate


@dataclass
class _Call:
    """One evaluate call's fixed inputs: the metrics asked, the runs found, where weights are."""

    names: list[str]
    explicit: bool
    baseline: str
    overwrite: bool
    root: Path
    runs: dict[Path, runstore.RunRecord]
    damaged: list[tuple[Path, str]]
    checks: _Prechecks
    rep: EvalReporter


def _open(run_dirs, metrics, weights_dir, baseline, overwrite, reporter) -> _Call:
    """Resolve the metrics, find and read the runs, refuse a mistyped baseline (before any write)."""
    from .metrics.weights import weights_root

    rep = reporter or EvalReporter()
    names, explicit = resolve_metrics(metrics)
    damaged: list[tuple[Path, str]] = []
    found = runstore.find_runs(run_dirs, damaged)
    root = weights_root(weights_dir)
    runs = {r: runstore.RunRecord.of(r, runstore.read_meta(r) or {}) for r in found}
    _check_baseline(baseline, list(runs.values()))
    for d, why in damaged:
        rep.warning(f"{d}: damaged run left out ({why})")
    return _Call(names, explicit, baseline, overwrite, root, runs, damaged, _Prechecks(root, baseline), rep)


def _plan_run(call: _Call, path: Path) -> _Job:
    """The run's job: its baseline, the metrics asked of it, what is left to compute."""
    from .metrics.registry import get_metric

    run = call.runs[path]
    is_base = run.recipe == call.baseline
    base = None if is_base else runstore.find_baseline(run, call.baseline, list(call.runs.values()))
    # defaults: a metric only where it applies (adherence on tiny-shapes runs)
    wanted = [n for n in call.names if call.explicit or get_metric(n).applies_to(run.model, run.family)]
    job = _Job(run, base.dir if base is not None else None, is_base, wanted)
    base_sha = base.meta.get("frames_sha256") if base is not None else None
    _plan(job, _read_existing(path), base_sha, call.checks, call.overwrite)
    return job


def _plan_shard(call: _Call, shard) -> tuple[list[_Job], list[_Job]]:
    """(every run's job, this shard's jobs); other shards' jobs get status "other-shard"."""
    from . import distributed

    jobs = [_plan_run(call, path) for path in call.runs]
    # This shard's runs: split over every run found (not over those with work left), so shards
    # started at different times agree on who owns what.
    mine = distributed.shard_runs(jobs, shard, key=_job_key)
    own = {id(j) for j in mine}
    for job in jobs:
        if id(job) not in own:
            job.status = "other-shard"
    _check_writable([j for j in mine if j.todo])
    kept = [j for j in mine if j.kept_baseline is not None]
    if kept:
        recipes = ", ".join(sorted({str(j.kept_baseline.get("recipe")) for j in kept}))
        one = len(kept) == 1
        call.rep.warning(f"{len(kept)} run{'' if one else 's'} keep{'s' if one else ''} the paired scores stored "
                         f"against {'its' if one else 'their'} {recipes} run: no {call.baseline} run of the same "
                         "settings is found now, so they are not recomputed")
    call.rep.planned([j.dir for j in mine], sum(bool(j.todo) for j in mine))
    return jobs, mine


def _score_claimed(call: _Call, job: _Job, frames: _Frames) -> tuple[_Job, list[str]]:
    """Claim the run, plan it again and compute its in-process metrics; (its job, its VBench dimensions)."""
    from .errors import DamagedRunError

    claim = runstore.claim_run(job.dir, "evaluate")
    if claim is None:
        job.status = "claimed"
        call.rep.warning(f"{job.dir}: being scored by another process "
                         f"({runstore.claim_holder(job.dir, 'evaluate')}); left to it")
        return job, []
    with claim:
        job = _plan_run(call, job.dir)  # another process may have scored it between our plan and our claim
        if not job.todo:
            return job, []
        call.rep.run_started(job.dir, job.todo)
        try:
            vdims = _score(job, call.checks, frames, call.root)
        except DamagedRunError as e:
            job.status, job.error = "damaged", str(e)
            call.rep.warning(f"{job.dir}: not scored, {e}")
            return job, []
        runstore.atomic_write_json(job.dir / METRICS_NAME, _document(job, call.baseline, call.root))
        job.status = "scored"
        return job, vdims


def _score_runs(call: _Call, todo: list[_Job]) -> dict[Path, _Job]:
    """Score every run with work left (VBench last, one subprocess for all); the jobs by folder."""
    frames = _Frames()
    done: dict[Path, _Job] = {}
    vbench_jobs: list[tuple[_Job, list[str]]] = []
    for job in todo:
        job, vdims = _score_claimed(call, job, frames)
        done[job.dir] = job
        if vdims:
            vbench_jobs.append((job, vdims))
        call.rep.run_done(job.dir, job.status)
    if vbench_jobs:
        _run_vbench(vbench_jobs, call.root, call.rep)
        for job, _ in vbench_jobs:
            runstore.atomic_write_json(job.dir / METRICS_NAME, _document(job, call.baseline, call.root))
    return done


def _results(call: _Call, jobs: list[_Job], own: set[Path]) -> list[dict]:
    """Every run's document with its status, the damaged runs last."""
    results = []
    for job in jobs:
        if job.status == "damaged":
            results.append(_damaged_result(job.dir, job.error or "damaged", job.meta))
            continue
        # another shard's run: its file as that shard wrote it (or as it is now, without torchrun)
        doc = _read_existing(job.dir) if job.status in ("skipped", "claimed") or job.dir not in own else None
        doc = doc or _document(job, call.baseline, call.root)
        results.append({**doc, "dir": str(job.dir), "status": job.status})
    return results + [_damaged_result(d, why) for d, why in call.damaged]


def _evaluate(run_dirs, metrics, weights_dir, baseline, overwrite, reporter, shard) -> list[dict]:
    from . import distributed

    call = _open(run_dirs, metrics, weights_dir, baseline, overwrite, reporter)
    jobs, mine = _plan_shard(call, shard)
    done = _score_runs(call, [j for j in mine if j.todo])
    jobs = [done.get(j.dir, j) for j in jobs]
    own = {j.dir for j in mine}
    if shard.launched:
        # a collective, so also the barrier: every rank's metrics.json files are written after it
        statuses: dict[str, str] = {}
        for part in distributed.all_gather({str(j.dir): j.status for j in jobs if j.dir in own}):
            statuses.update(part)
        for job in jobs:
            if job.dir not in own:
                job.status = statuses.get(str(job.dir), "other-shard")
    return _results(call, jobs, own)


__all__ = ["BASELINE_RUN", "EvalReporter", "FORMAT", "FORMAT_VERSION", "METRICS_NAME", "evaluate_runs",
           "find_runs", "metric_unavailable", "no_baseline_reason", "resolve_metrics"]
