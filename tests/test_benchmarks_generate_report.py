"""benchmarks/generate_report.py: per recipe the last seed's run, median step time, ratio to fp16."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "generate_report.py"


def _load():
    spec = importlib.util.spec_from_file_location("generate_report", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(root, recipe, seed, steps, clip_s):
    d = root / "wan2.1-t2v-1.3b" / recipe / "p" / f"seed-{seed}"
    d.mkdir(parents=True)
    meta = {"model": {"name": "wan2.1-t2v-1.3b"}, "recipe": {"name": recipe}, "seed": seed, "steps": len(steps),
            "timings": {"sample_s": clip_s, "transformer_s_per_step": steps, "peak_memory_gib": 20.5},
            "attention_calls": {"quantized": 4, "high": 2, "fallback": 0}, "files": {}}
    (d / "meta.json").write_text(json.dumps(meta))


def test_last_seed_median_step_and_ratio(tmp_path, capsys):
    _run(tmp_path, "fp16", 0, [9.0, 2.0, 2.0, 2.0], 30.0)  # seed 0: compilation in its first step
    _run(tmp_path, "fp16", 1, [2.1, 2.0, 2.0, 1.9], 20.0)
    _run(tmp_path, "sage2-int8", 1, [1.7, 1.6, 1.6, 1.5], 18.0)
    rows = _load().rows(tmp_path)
    assert [r["recipe"] for r in rows] == ["fp16", "sage2-int8"]
    assert rows[0]["seed"] == 1 and rows[0]["step_s"] == 2.0 and rows[0]["x_fp16"] == 1.0
    assert rows[1]["step_s"] == 1.6 and rows[1]["x_fp16"] == 1.25
    assert _load().main([str(tmp_path)]) == 0
    assert "| wan2.1-t2v-1.3b | sage2-int8 | 18.0 | 1.600 | 1.250× | 20.5 | 4 / 2 / 0 |" in capsys.readouterr().out


def test_missing_folder_is_one_line(tmp_path, capsys):
    assert _load().main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
