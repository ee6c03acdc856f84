"""benchmarks/sass_key_loop.py's reading of a disassembly (the loops, their opcode counts, how close together the
MUFU instructions come), on a hand-written SASS listing; compiling a kernel needs triton 3.6 and is run by hand
(benchmarks/README.md)."""

from benchmark_scripts import load

# cuobjdump's layout: address comment, instruction, semicolon; one loop from 0x10 back-branching at 0x70
LISTING = """
        /*0000*/                   FFMA R1, R2, R3, R4 ;
        /*0010*/                   MUFU.EX2 R5, R1 ;
        /*0020*/                   MUFU.EX2 R6, R1 ;
        /*0030*/               @P0 MUFU.EX2 R7, R1 ;
        /*0040*/                   FADD R8, R5, R6 ;
        /*0050*/                   FADD R8, R8, R7 ;
        /*0060*/                   MUFU.EX2 R9, R8 ;
        /*0070*/                   BRA 0x10 ;
        /*0080*/                   EXIT ;
"""


def test_the_loop_and_its_opcodes():
    s = load("sass_key_loop")
    (n, hist, texts), = s.key_loops(LISTING, "triton")
    assert n == 7 and texts[0] == "MUFU.EX2 R5, R1" and texts[-1] == "BRA 0x10"
    assert dict(hist) == {"MUFU": 4, "FADD": 2, "BRA": 1}  # the predicate of @P0 MUFU stripped


def test_mufu_spacing_counts_runs_windows_and_close_pairs():
    s = load("sass_key_loop")
    (_, _, texts), = s.key_loops(LISTING, "triton")
    # MUFUs at positions 0, 1, 2 and 5 of the loop: a run of three, all four within 16, gaps 1, 1, 3
    assert s.mufu_spacing(texts) == {"longest_run": 3, "most_in_16": 4, "close_pairs": 2, "pairs": 3}
    assert s.mufu_spacing(["FADD R1, R2, R3"]) == {"longest_run": 0, "most_in_16": 0, "close_pairs": 0, "pairs": 0}
    spread = ["MUFU.EX2 R1, R1"] + ["FFMA R2, R2, R2, R2"] * 20 + ["MUFU.EX2 R1, R1"]
    assert s.mufu_spacing(spread) == {"longest_run": 1, "most_in_16": 1, "close_pairs": 0, "pairs": 1}
