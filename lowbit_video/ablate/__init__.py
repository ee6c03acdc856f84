"""Ablation studies declared as data (recipes/ablations/*.toml) and run by `lowbit-video ablate`.

    from lowbit_video.ablate import AblateOptions, run_study
    result = run_study("table3", AblateOptions(prompts="prompts/smoke.txt", steps=4, out="runs/smoke"))

The kinds of study are the entries of kinds.KINDS (`lowbit-video ablate --help` lists them), each
with its parameters, its run and its terminal view. Each reuses what exists (complete runs,
matching captures) and writes <out>/<study>.md/.json (+ PNGs).
"""

from __future__ import annotations

from .common import AblateOptions, Reporter
from .kinds import KINDS, StudyKind
from .studies import Study, available_studies, list_studies, load_study


def run_study(name_or_path: "str | Study", opts: AblateOptions | None = None, reporter: Reporter | None = None) -> dict:
    """Run one study; returns its JSON result (plus "files": the outputs written).

    Many processes (`opts.shard` "i/n", or torchrun's RANK / WORLD_SIZE): each process makes and scores
    its share of the runs (or captures), as `generate --shard` / `evaluate --shard` split them; under
    torchrun rank 0 then writes the study's outputs once every rank is done, and the other ranks (and
    every `--shard i/n` job) return {"study", "model", "shard", ..., "files": []} without writing them."""
    import dataclasses

    from ..devices import resolve_device
    from ..distributed import ShardSpec, process_group

    opts = opts or AblateOptions()
    opts = dataclasses.replace(opts, device=resolve_device(opts.device))
    study = load_study(name_or_path)
    run = KINDS[study.kind].run
    spec = opts.shard if isinstance(opts.shard, ShardSpec) else ShardSpec.from_cli_or_env(opts.shard)
    # generate's and evaluate's own process_group() see this group and leave it alone
    with process_group(spec, device=opts.device):
        return run(study, dataclasses.replace(opts, shard=spec), reporter)


__all__ = ["KINDS", "AblateOptions", "Reporter", "Study", "StudyKind", "available_studies", "list_studies", "load_study",
           "run_study"]
