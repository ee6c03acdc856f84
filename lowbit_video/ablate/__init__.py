"""Ablation studies declared as data (recipes/ablations/*.toml) and run by `lowbit-video ablate`.

    from lowbit_video.ablate import AblateOptions, run_study
    result = run_study("table3", AblateOptions(prompts="prompts/smoke.txt", steps=4, out="runs/smoke"))

Kinds: `table3` (the MXAttention paper's Table 3), `qmax-sweep` (Table 4), `rowsum` (Figure 7).
Each reuses what exists (complete runs, matching captures) and writes <out>/<study>.md/.json (+ PNGs).
"""

from __future__ import annotations

from .common import AblateOptions, Reporter
from .studies import Study, available_studies, list_studies, load_study


def run_study(name_or_path: str, opts: AblateOptions | None = None, reporter: Reporter | None = None) -> dict:
    """Run one study; returns its JSON result (plus "files": the outputs written)."""
    study = load_study(name_or_path)
    if study.kind == "table3":
        from .table3 import run
    elif study.kind == "qmax-sweep":
        from .qmax_sweep import run
    else:
        from .rowsum import run
    return run(study, opts or AblateOptions(), reporter)


__all__ = ["AblateOptions", "Reporter", "Study", "available_studies", "list_studies", "load_study", "run_study"]
