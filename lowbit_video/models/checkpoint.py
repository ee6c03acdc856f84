"""Checking a diffusers-format checkpoint folder before loading it, with one-line errors.

`check_pipeline_folder(path, expected_pipelines=..., required=...)` reads model_index.json and
checks that every component it names has its folder, its config file and (for models) a weights
file. What a component's folder holds follows its class: a model (torch module) config.json and
weights; a diffusers config object (scheduler, guider) the file its class names (`config_name`:
scheduler_config.json, guider_config.json); a tokenizer its tokenizer files; a processor, image
processor or feature extractor its preprocessor / processor config or tokenizer files. The first
problem found is raised as a UserError naming the path and what is missing, e.g.

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
# what a processor / image processor / feature extractor folder holds (a processor also its tokenizer's files)
_PREPROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", *_TOKENIZER_FILES)
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


def _component_class(lib: str, klass: str) -> type | None:
    """The class model_index.json names (from diffusers or transformers, the libraries pipelines load from), None
    where it cannot be found here (from_pretrained reports that)."""
    if lib not in ("diffusers", "transformers"):
        return None
    try:
        import importlib

        cls = getattr(importlib.import_module(lib), klass, None)
    except (ImportError, RuntimeError):
        return None
    return cls if isinstance(cls, type) else None


def _kind(lib: str, klass: str) -> tuple[str, tuple[str, ...]]:
    """("model", ("config.json",)), ("config", (its config file,)) or ("files", (any of these,)) for a component."""
    cls = _component_class(lib, klass)
    if cls is not None:
        import torch

        if issubclass(cls, torch.nn.Module):
            return "model", ("config.json",)
        name = getattr(cls, "config_name", None)
        if lib == "diffusers" and isinstance(name, str):
            return "config", (name,)
        mro = {c.__name__ for c in cls.__mro__}
        if mro & {"ProcessorMixin", "ImageProcessingMixin", "FeatureExtractionMixin", "BaseImageProcessor"}:
            return "files", _PREPROCESSOR_FILES
    if "Scheduler" in klass:
        return "config", (_SCHEDULER_CONFIG,)
    if "Tokenizer" in klass or klass == "TokenizersBackend":
        return "files", _TOKENIZER_FILES
    return "model", ("config.json",)


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
        kind, files = _kind(lib, klass)
        if kind == "files":
            if not any((folder / f).is_file() for f in files):
                what = "tokenizer" if files == _TOKENIZER_FILES else "preprocessor"
                raise UserError(f"{folder}: no {what} files ({', '.join(files[:2])}) {where}")
            continue
        if not (folder / files[0]).is_file():
            raise UserError(f"{folder}: no {files[0]} {where}")
        if kind == "model" and not any(any(folder.glob(pat)) for pat in _WEIGHT_PATTERNS):
            raise UserError(f"{folder}: no weights (*.safetensors or *.bin) {where}")
    return index


__all__ = ["check_pipeline_folder", "components", "read_model_index"]
