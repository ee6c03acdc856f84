"""`lowbit-video evaluate`, `lowbit-video weights check|fetch` and `lowbit-video metrics`.

Thin: parse, call lowbit_video.evaluate / lowbit_video.metrics, render with rich (progress on
stderr, tables or one JSON object on stdout). User mistakes are one line on stderr, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from ..evaluate import EvalReporter
from . import weights_fetch
from .common import JsonOpt, err, line_progress, out, print_json, progress_bar, user_errors

WeightsDirOpt = typer.Option(None, "--weights-dir", help="Weights root (default: $LOWBIT_VIDEO_WEIGHTS_DIR, else ~/.cache/lowbit-video/weights).")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 100 else f"{v:.2f}"
    return "n/a"


def _availability(root: Path) -> dict:
    """{metric: "available" | {"unavailable": reason}} for every registered metric under `root`."""
    from ..evaluate import metric_unavailable
    from ..metrics.registry import list_metrics

    out: dict[str, Any] = {}
    for m in list_metrics():
        why = metric_unavailable(m, root)
        out[m.name] = "available" if why is None else {"unavailable": why}
    return out


class _EvalProgress(EvalReporter):
    """evaluate's progress on stderr: one bar over the runs with work, a line for the VBench subprocess,
    a `warning:` line per warning (also under --quiet and --json: they say what was not scored)."""

    def __init__(self, quiet: bool) -> None:
        super().__init__()
        self.err, self.quiet = err, quiet
        self.progress = progress_bar(disable=quiet or not err.is_terminal)
        self.lines = line_progress("evaluate", quiet)
        self.task = None
        self.n_runs = self.todo = 0

    def warning(self, text: str) -> None:
        super().warning(text)
        self.progress.console.print(f"warning: {text}", highlight=False, markup=False, soft_wrap=True)

    def planned(self, runs: list, todo: int) -> None:
        self.n_runs, self.todo = len(runs), todo
        if not self.quiet and len(runs) > todo:
            self.err.print(f"{len(runs) - todo} of {len(runs)} runs already scored", highlight=False)
        if todo:
            self.progress.start()
            self.task = self.progress.add_task("evaluate", total=todo)
            if self.lines:
                self.lines.planned(todo, len(runs))

    @staticmethod
    def _label(run: Path) -> str:
        parts = run.parts[-4:]  # model, recipe, prompt slug, seed-<s> of <out>/<model>/<recipe>/<slug>/seed-<s>
        return f"{parts[0]} · {parts[-1]} · {parts[1][:28]}" if len(parts) < 4 else f"{parts[1]} · {parts[3]} · {parts[2][:28]}"

    def run_started(self, run: Path, metrics: list) -> None:
        self.progress.update(self.task, description=self._label(run))

    def run_done(self, run: Path, status: str) -> None:
        self.progress.advance(self.task)
        if self.lines:
            self.lines.run_done(self._label(run), status)

    def vbench_started(self, n_videos: int, dims: list) -> None:
        self.progress.stop()
        if not self.quiet:
            self.err.print(f"VBench: {n_videos} video{'s' * (n_videos != 1)} x {len(dims)} dimension"
                           f"{'s' * (len(dims) != 1)} (subprocess) ...", highlight=False)

    def vbench_done(self, seconds: float) -> None:
        if not self.quiet:
            self.err.print(f"VBench done in {seconds:.1f} s", highlight=False)

    def close(self) -> None:
        self.progress.stop()


def _summary(results: list[dict], title: str) -> None:
    from rich.table import Table

    metric_names: list[str] = []
    for r in results:
        metric_names += [n for n in r["metrics"] if n not in metric_names]
    numeric = [n for n in metric_names if any(isinstance(r["metrics"].get(n), float) for r in results)]
    table = Table(title=title)
    for col in ("model", "recipe", "prompt", "seed", "status", *numeric):
        table.add_column(col, overflow="fold", justify="right" if col in numeric or col == "seed" else "left")
    for r in results:
        run = r["run"]
        prompt = str(run.get("prompt") or "")
        table.add_row(str(run.get("model")), str(run.get("recipe")), prompt if len(prompt) <= 40 else prompt[:39] + "…",
                      str(run.get("seed")), r["status"], *(_fmt(r["metrics"].get(n)) for n in numeric))
    out.print(table)
    reasons: dict[tuple[str, str], int] = {}
    for r in results:
        for n, v in r["metrics"].items():
            if isinstance(v, dict):
                key = (n, v.get("unavailable", ""))
                reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        out.print("[bold]unavailable[/bold] (n/a):")
        for (n, why), count in reasons.items():
            out.print(f"  {n} ({count} run{'s' * (count != 1)}): {why}", highlight=False, markup=False)
    scored = sum(r["status"] == "scored" for r in results)
    skipped = sum(r["status"] == "skipped" for r in results)
    extra = "".join(f", {n} {k} (see the warnings)" for k in ("damaged", "claimed")
                    if (n := sum(r["status"] == k for r in results)))
    out.print(f"scored {scored} run{'s' * (scored != 1)}, {skipped} already scored{extra}; "
              f"metrics.json beside each run", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("evaluate")
    @user_errors
    def evaluate(
        run_dirs: list[Path] = typer.Argument(..., help="Run directories, or folders above them (searched for complete runs)."),
        metrics: Optional[list[str]] = typer.Option(None, "--metrics", help="Metric names, repeated or comma-separated (default: all; see `lowbit-video metrics`)."),
        weights_dir: Optional[str] = WeightsDirOpt,
        baseline: str = typer.Option("fp16", "--baseline", help="Recipe of the baseline run paired metrics compare against."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Recompute every asked metric, even those already in metrics.json."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress; print only the one-line summary."),
        shard: Optional[str] = typer.Option(None, "--shard", help="Score only shard i of n of the runs (i counts from 0), e.g. --shard $SLURM_ARRAY_TASK_ID/8 in a cluster array job. Under torchrun the rank picks the shard by itself."),
        as_json: bool = JsonOpt,
    ) -> None:
        """Score runs: PSNR, SSIM, cosine, LPIPS against the baseline (FP16) run, VBench dimensions, tiny-shapes adherence.

        Writes metrics.json beside each run (atomically) and skips metrics already scored. A metric whose weights are missing is stored as {"unavailable": reason}; evaluate never downloads weights (`lowbit-video weights check`, `lowbit-video weights fetch`).

        Many processes: `torchrun --nproc-per-node N -m lowbit_video evaluate ...` splits the runs over the N ranks (each scored by exactly one; rank 0 prints the table when all are done); `--shard i/n` does the same for array jobs.
        """
        import sys

        from ..distributed import ShardSpec
        from ..evaluate import evaluate_runs

        spec = ShardSpec.from_cli_or_env(shard)
        prefix = f"[rank {spec}] " if spec.launched else (f"[shard {spec}] " if not spec.single else "")
        # Under torchrun only rank 0 draws progress and prints the result; the others print one line.
        talk = spec.is_main or not spec.launched
        reporter = _EvalProgress(quiet=quiet or as_json or not talk)
        try:
            results = evaluate_runs(run_dirs, metrics=metrics, weights_dir=weights_dir, baseline=baseline,
                                    overwrite=overwrite, reporter=reporter, shard=spec)
        finally:
            reporter.close()
        scored = sum(r["status"] == "scored" for r in results)
        other = sum(r["status"] == "other-shard" for r in results)
        not_scored = {k: sum(r["status"] == k for r in results) for k in ("damaged", "claimed")}
        if not talk:
            print(f"{prefix}scored {reporter.todo} of this rank's {reporter.n_runs} runs, "
                  f"{reporter.n_runs - reporter.todo} already scored", file=sys.stderr)
            return
        if as_json:
            doc = {"runs": results, "scored": scored, "skipped": sum(r["status"] == "skipped" for r in results),
                   **not_scored, "warnings": reporter.warnings,
                   "weights_root": next((r["weights_root"] for r in results if "weights_root" in r), None)}
            if not spec.single:
                doc.update({"shard": spec.to_dict(), "other_shard": other})
            print_json(doc)
        elif other:
            print(f"{prefix}scored {scored} of this process's {len(results) - other} runs, "
                  f"{len(results) - other - scored} already scored; {other} runs belong to other shards")
        elif quiet:
            extra = "".join(f", {n} {k}" for k, n in not_scored.items() if n)
            print(f"scored {scored} runs, {sum(r['status'] == 'skipped' for r in results)} already scored{extra}")
        else:
            _summary(results, f"evaluate · baseline {baseline} · {len(results)} run{'s' * (len(results) != 1)}")

    weights_app = typer.Typer(help="The weight files learned metrics need: check them, fetch them.", no_args_is_help=True)
    app.add_typer(weights_app, name="weights")

    @weights_app.command("check")
    @user_errors
    def weights_check(weights_dir: Optional[str] = WeightsDirOpt, as_json: bool = JsonOpt) -> None:
        """List every file of the weights manifest: present, missing, bad-hash or bad-size, and the metrics using it.

        Always exits 0: missing files only make their metrics unavailable (`weights fetch` gets them). A file without a published hash that `weights fetch` downloaded is verified against the hash recorded then ("hash recorded locally, not published").
        """
        from rich.table import Table

        from ..metrics.weights import check, weights_root

        root = weights_root(weights_dir)
        files = check(root)
        avail = _availability(root)
        if as_json:
            print_json({"root": str(root), "files": [f.to_json() for f in files], "metrics": avail})
            return
        colour = {"present": "green", "missing": "yellow", "bad-hash": "red", "bad-size": "red"}
        table = Table(title=f"weights · {root}")
        for col in ("key", "path", "state", "used by", "detail"):
            table.add_column(col, overflow="fold")
        for f in files:
            table.add_row(f.key, f.relpath, f"[{colour[f.state]}]{f.state}[/{colour[f.state]}]", ", ".join(f.used_by) or "none (optional)",
                          f.detail)
        out.print(table)
        ok = [n for n, v in avail.items() if v == "available"]
        out.print(f"metrics available: {', '.join(ok) or 'none'}", highlight=False)
        out.print(f"unavailable: {', '.join(n for n in avail if n not in ok) or 'none'}", highlight=False)

    weights_fetch.register(weights_app, WeightsDirOpt)

    @app.command("metrics")
    @user_errors
    def metrics_list(weights_dir: Optional[str] = WeightsDirOpt, as_json: bool = JsonOpt) -> None:
        """List the metrics evaluate knows: kind, what each needs, and whether it can run here."""
        from rich.table import Table

        from ..metrics.registry import list_metrics
        from ..metrics.weights import weights_root

        root = weights_root(weights_dir)
        avail = _availability(root)
        rows = [{**m.listing(), "status": avail[m.name]} for m in list_metrics()]
        if as_json:
            print_json({"root": str(root), "metrics": rows})
            return
        table = Table(title=f"metrics · weights root {root}")
        for col in ("name", "kind", "better", "weights", "status", "description"):
            table.add_column(col, overflow="fold")
        for r in rows:
            st = r["status"]
            table.add_row(r["name"], r["kind"], "higher" if r["higher_is_better"] else "lower",
                          ", ".join(r["weights"]) or "none",
                          "[green]available[/green]" if st == "available" else f"[yellow]{st['unavailable']}[/yellow]",
                          r["description"] + (f" ({', '.join(r['models'])} only)" if r["models"] else ""))
        out.print(table)


__all__ = ["register"]
