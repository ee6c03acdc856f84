"""benchmarks/generate_report.py: per recipe the last seed's run, median step time, ratio to fp16."""

import json

import pytest

from benchmark_scripts import load


def _load():
    return load("generate_report")


def _run(root, recipe, seed, steps, clip_s, planned=None):
    """A run's meta; `planned`: a compiled run's (generate --compile), the steps its policy planned to quantize."""
    d = root / "wan2.1-t2v-1.3b" / recipe / ("p" if planned is None else "compiled") / f"seed-{seed}"
    d.mkdir(parents=True)
    meta = {"model": {"name": "wan2.1-t2v-1.3b"}, "recipe": {"name": recipe}, "seed": seed, "steps": len(steps),
            "timings": {"sample_s": clip_s, "transformer_s_per_step": steps, "peak_memory_gib": 20.5},
            "attention_calls": {"quantized": 4, "high": 2, "fallback": 0, "engine": 0,
                                "by_step": {str(i): {"quantized": int(i >= 2)} for i in range(len(steps))}},
            "files": {}}
    if planned is not None:  # compiled blocks count no calls
        meta.update(compile={"scope": "repeated blocks", "backend": "inductor"},
                    attention_calls={"counted": False, "num_steps": len(steps), "planned_quantized_steps": planned})
    (d / "meta.json").write_text(json.dumps(meta))


def test_last_seed_quantized_and_mean_steps(tmp_path, capsys):
    # the policy keeps steps 0 and 1 in 16 bit (by_step: quantized from step 2 on)
    _run(tmp_path, "fp16", 0, [9.0, 2.0, 2.0, 2.0], 30.0)  # seed 0: compilation in its first step
    _run(tmp_path, "fp16", 1, [3.0, 2.0, 2.0, 2.0, 2.0], 20.0)
    _run(tmp_path, "sage2-int8", 1, [5.0, 2.0, 4.5, 1.7, 1.6, 1.5], 18.0)  # step 2: first quantized (compiles)
    rows = _load().rows(tmp_path)
    assert [r["recipe"] for r in rows] == ["fp16", "sage2-int8"]
    fp16, sage = rows
    assert fp16["seed"] == 1 and fp16["mean_step_s"] == 2.0 and fp16["x_fp16_mean_step"] == 1.0
    assert sage["quantized_steps"] == 4 and sage["quantized_step_s"] == 1.65  # median of 4.5, 1.7, 1.6, 1.5
    assert sage["x_fp16_quantized_step"] == round(2.0 / 1.65, 3)
    # the mean leaves out step 0 and the first quantized step (2): 2.0, 1.7, 1.6, 1.5
    assert sage["mean_step_s"] == pytest.approx(1.7) and sage["x_fp16_mean_step"] == round(2.0 / 1.7, 3)
    assert _load().main([str(tmp_path)]) == 0
    assert ("| wan2.1-t2v-1.3b | sage2-int8 | 6 (4) | 18.0 | 1.650 | 1.212× | 1.700 | 1.176× | 20.5 | 4 (0) / 2 / 0 |"
            in capsys.readouterr().out)


def test_missing_folder_is_one_line(tmp_path, capsys):
    assert _load().main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_compiled_runs_are_rows_of_their_own_against_compiled_fp16(tmp_path, capsys):
    _run(tmp_path, "fp16", 0, [3.0, 2.0, 2.0, 2.0], 20.0)
    _run(tmp_path, "fp16", 0, [40.0, 1.0, 1.0, 1.0, 1.0], 50.0, planned=[])  # step 0: the compilation
    # the policy keeps steps 0 and 1 in 16 bit; step 2, the first quantized one, compiles the quantized graph
    _run(tmp_path, "sage2-int8", 0, [35.0, 1.0, 9.0, 0.5, 0.5], 40.0, planned=[2, 3, 4])
    rows = _load().rows(tmp_path)
    assert [(r["recipe"], r["compiled"]) for r in rows] == [("fp16", False), ("fp16", True), ("sage2-int8", True)]
    sage = rows[2]
    # against the compiled fp16 (1.0 s a warm step), not the eager one (2.0 s)
    assert sage["quantized_steps"] == 3 and sage["quantized_step_s"] == 0.5  # median of 9.0, 0.5, 0.5
    assert sage["x_fp16_quantized_step"] == 2.0 and sage["calls"] is None
    assert sage["mean_step_s"] == pytest.approx(2 / 3) and sage["x_fp16_mean_step"] == 1.5  # 1.0, 0.5, 0.5
    assert _load().main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert ("| wan2.1-t2v-1.3b | sage2-int8 (compiled) | 5 (3) | 40.0 | 0.500 | 2.000× | 0.667 | 1.500× | 20.5 "
            "| not counted (compiled) |") in text
    assert "| wan2.1-t2v-1.3b | fp16 | 4 (2) | 20.0 |" in text  # the eager row as before
