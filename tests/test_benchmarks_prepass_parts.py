"""benchmarks/prepass_parts.py's argument handling: tilings and shapes refused in one line; the timing itself needs
a CUDA GPU and is run by hand (benchmarks/README.md)."""

import pytest

from benchmark_scripts import load
from kernel_helpers import HAS_TRITON, REPO, run_interpreted


def test_tiles_are_rows_or_tokens_by_warps():
    parse = load("prepass_parts").parse_tiles
    assert parse("16x4") == (16, 4)
    assert parse("128x8") == (128, 8)
    for bad in ("16", "16x3", "12x4", "x4", "16x", "ax4"):
        with pytest.raises(ValueError, match="expected AxW"):
            parse(bad)


def test_bad_input_is_a_one_line_error(capsys):
    main = load("prepass_parts").main
    assert main(["--shapes", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown shape 'nope'; the zoo's: ")
    assert main(["--k-tiles", "16x3"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_without_a_gpu_it_says_so(monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert load("prepass_parts").main(["--shapes", "short"]) == 2
    assert capsys.readouterr().err == "error: prepass_parts.py needs a CUDA GPU (none is visible)\n"


_PARTS_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from benchmark_scripts import load
parts = load("prepass_parts").measure(2, 300, 64, [(16, 4), (32, 2)], [(32, 4), (16, 2)], device="cpu",
                                      us=lambda fn: (fn(), 0.0)[1])
print(json.dumps([[name, same] for name, _, same in parts]))
"""


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
def test_every_part_writes_the_prepass_bits_under_triton_interpreter():
    """Each part the tool times, run alone (the first launch's statistics and Q programs, the second launch, its K
    and V halves at other tilings), writes what the whole pre-pass writes, bit for bit (its fp64 mean to rounding):
    under the CPU interpreter, 300 tokens of head_dim 64 (a ragged last key block)."""
    parts = run_interpreted(_PARTS_SCRIPT.format(tests=str(REPO / "tests")))
    assert [name for name, _ in parts] == [
        "pre-pass", "copy of Q, K, V", "1: Q codes + statistics", "1: statistics alone", "1: Q codes alone",
        "2: K and V codes (32 rows, 32 tokens, 4 warps)", "2: K codes alone, 16 rows x 4 warps",
        "2: K codes alone, 32 rows x 2 warps", "2: V codes alone, 32 tokens x 4 warps",
        "2: V codes alone, 16 tokens x 2 warps"]
    assert all(same for _, same in parts), parts
