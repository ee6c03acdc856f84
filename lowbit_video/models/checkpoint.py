"""Checking a diffusers-format checkpoint folder before loading it, with one-line errors.

`check_pipeline_folder(path, expected_pipelines=..., required=...)` reads model_index.json and
checks that every component it names has its folder, its config file and (for models) a weights
file. The first problem found is raised as a UserError naming the path and what is missing, e.g.

    /x: no such directory
    /x: not a diffusers model folder (no model_index.json)
    /x/transformer: no config.json (component 'transformer' named in model_index.json)
    /x/transformer: no weights (*.safetensors or *.bin)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from ..errors import UserError

# Config file per kind of component (by library/class); models also need weights.
_SCHEDULER_CONFIG = "scheduler_config.json"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "spiece.model", "vocab.json", "tokenizer.model")
_WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.gguf")


def read_model_index(path: str | Path) -> dict[str, Any]:
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"{p}: no such directory")
    if not p.is_dir():
        raise UserError(f"{p}: not a directory")
    index = p / "model_index.json"
    if not index.is_file():
        raise UserError(f"{p}: not a diffusers model folder (no model_index.json)")
    try:
        data = json.loads(index.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{index}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{index}: expected a JSON object")
    return data


def components(index: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Component name -> (library, class) for the non-null components of a model_index.json."""
    out = {}
    for name, value in index.items():
        if name.startswith("_") or not isinstance(value, list) or len(value) != 2:
            continue
        lib, cls = value
        if lib is None or cls is None:
            continue
        out[name] = (str(lib), str(cls))
    return out


def check_pipeline_folder(path: str | Path, *, expected_pipelines: Iterable[str], required: Iterable[str] = (),
                          model_name: str = "") -> dict[str, Any]:
    """Validate a pipeline folder; returns its model_index.json. Raises UserError (one line)."""
    p = Path(path).expanduser()
    index = read_model_index(p)
    expected = tuple(expected_pipelines)
    cls = index.get("_class_name")
    if expected and cls not in expected:
        what = f" for {model_name}" if model_name else ""
        raise UserError(f"{p}: model_index.json describes a {cls}, expected {' or '.join(expected)}{what}")
    comps = components(index)
    for name in required:
        if name not in comps:
            raise UserError(f"{p}: model_index.json names no '{name}' component (needed for {model_name or cls})")
    for name, (lib, klass) in comps.items():
        folder = p / name
        where = f"(component '{name}' named in model_index.json)"
        if not folder.is_dir():
            raise UserError(f"{folder}: missing folder {where}")
        if "Scheduler" in klass:
            if not (folder / _SCHEDULER_CONFIG).is_file():
                raise UserError(f"{folder}: no {_SCHEDULER_CONFIG} {where}")
        elif "Tokenizer" in klass or klass == "TokenizersBackend":
            if not any((folder / f).is_file() for f in _TOKENIZER_FILES):
                raise UserError(f"{folder}: no tokenizer files ({', '.join(_TOKENIZER_FILES[:2])}) {where}")
        else:
            if not (folder / "config.json").is_file():
                raise UserError(f"{folder}: no config.json {where}")
            if not any(any(folder.glob(pat)) for pat in _WEIGHT_PATTERNS):
                raise UserError(f"{folder}: no weights (*.safetensors or *.bin) {where}")
    return index


__all__ = ["check_pipeline_folder", "components", "read_model_index"]
