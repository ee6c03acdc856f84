"""VBench's standard prompt suite as prompts for `generate` / `ablate` (`--prompts vbench[:<dimension>]`).

The suite is the `VBench_full_info.json` that ships inside the vbench package (found through its
import spec; vbench itself is not imported, it has side effects at import): 946 entries of
{"prompt_en", "dimension": [...], "auxiliary_info": {...}}, some prompts listed under several
entries. Here a prompt appears once, with the union of its entries' dimensions and auxiliary info.

* `vbench`: every prompt of the suite; `vbench:<dimension>`: the prompts listed for that dimension.
* A limit (`--prompt-limit N`) takes the first N: for one dimension in VBench's order; for the
  whole suite the dimensions take turns (first prompt of each dimension, then the second, ...), so
  a small limit still reaches every dimension.

Each run made from the suite records `suite_entry(...)` in its meta.json ("vbench"): `evaluate`
then scores the dimensions VBench refuses for free-text prompts (object_class, color, scene, ...)
in VBench's standard mode, on the prompts the suite lists them for (metrics/vbench.py).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .errors import UserError

SOURCE = "vbench"
FULL_INFO = "VBench_full_info.json"
INSTALL_HINT = "scripts/install-vbench.sh"


@dataclass(frozen=True)
class SuitePrompt:
    prompt: str
    dimensions: tuple[str, ...]
    auxiliary_info: dict[str, Any] = field(default_factory=dict)


def is_suite(source: str | None) -> bool:
    """Whether a --prompts value names VBench's suite rather than a file."""
    return source is not None and (str(source) == SOURCE or str(source).startswith(SOURCE + ":"))


def full_info_path() -> Path:
    """VBench_full_info.json inside the installed vbench package (UserError when not installed)."""
    try:
        spec = importlib.util.find_spec("vbench")
    except (ImportError, ValueError):
        spec = None
    path = Path(spec.origin).parent / FULL_INFO if spec is not None and spec.origin else None
    if path is None or not path.is_file():
        raise UserError(f"--prompts vbench: VBench's prompt list ships with the vbench package, which is not "
                        f"installed (install it with {INSTALL_HINT})")
    return path


def read_full_info(path: str | Path | None = None) -> list[dict]:
    """VBench's entries as they are in the file."""
    path = Path(path) if path is not None else full_info_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read VBench's prompt list ({e})") from None
    if not isinstance(data, list) or not all(isinstance(e, dict) and isinstance(e.get("prompt_en"), str)
                                             and isinstance(e.get("dimension"), list) for e in data):
        raise UserError(f"{path}: not VBench's full-info list (entries of prompt_en, dimension)")
    return data


def suite(entries: Sequence[dict]) -> list[SuitePrompt]:
    """Unique prompts in first-seen order, each with the union of its entries' dimensions and info."""
    merged: dict[str, tuple[list[str], dict]] = {}
    for e in entries:
        dims, info = merged.setdefault(e["prompt_en"], ([], {}))
        dims.extend(d for d in e["dimension"] if d not in dims)
        info.update(e.get("auxiliary_info") or {})
    return [SuitePrompt(p, tuple(d), i) for p, (d, i) in merged.items()]


def dimensions(prompts: Sequence[SuitePrompt]) -> list[str]:
    """Every dimension of the suite, in first-seen order."""
    return list(dict.fromkeys(d for p in prompts for d in p.dimensions))


def suite_prompts(source: str, limit: int | None = None, path: str | Path | None = None) -> list[SuitePrompt]:
    """The prompts `source` ("vbench" or "vbench:<dimension>") names, at most `limit` of them."""
    if limit is not None and limit < 1:
        raise UserError(f"--prompt-limit must be positive, got {limit}")
    prompts = suite(read_full_info(path))
    dims = dimensions(prompts)
    dim = str(source)[len(SOURCE) + 1:] if str(source) != SOURCE else None
    if dim is not None:
        if dim not in dims:
            raise UserError(f"--prompts {source}: VBench has no dimension {dim!r} (dimensions: {', '.join(dims)})")
        chosen = [p for p in prompts if dim in p.dimensions]
        return chosen[:limit] if limit is not None else chosen
    if limit is None:
        return prompts
    # dimensions take turns, so that a small limit reaches every dimension
    queues = {d: [p for p in prompts if d in p.dimensions] for d in dims}
    chosen, seen = [], set()
    while len(chosen) < limit and any(queues.values()):
        for d in dims:
            while queues[d] and queues[d][0].prompt in seen:
                queues[d].pop(0)
            if queues[d] and len(chosen) < limit:
                p = queues[d].pop(0)
                chosen.append(p)
                seen.add(p.prompt)
    return chosen


def suite_entry(p: SuitePrompt) -> dict[str, Any]:
    """What a run's meta.json records about its prompt (key "vbench")."""
    return {"suite": FULL_INFO, "prompt_en": p.prompt, "dimension": list(p.dimensions),
            "auxiliary_info": dict(p.auxiliary_info)}


def entries_for(prompts: Sequence[str], dimension: str, path: str | Path | None = None) -> list[dict]:
    """VBench's own entries for `dimension` whose prompt is among `prompts` (the full-info list its
    standard mode reads, cut to the videos at hand)."""
    wanted = set(prompts)
    return [e for e in read_full_info(path) if e["prompt_en"] in wanted and dimension in e["dimension"]]


__all__ = ["FULL_INFO", "SOURCE", "SuitePrompt", "dimensions", "entries_for", "full_info_path", "is_suite",
           "read_full_info", "suite", "suite_entry", "suite_prompts"]
