"""Progress lines for a stderr without a terminal (CI and cluster logs)."""

import io

from lowbit_video.progress_lines import LineProgress


def test_a_line_per_run_and_per_quarter_of_the_steps_with_elapsed_time():
    now = [100.0]
    out = io.StringIO()
    p = LineProgress("generate", out, clock=lambda: now[0])
    p.planned(2, 3)
    for run in ("fp16 · seed 0", "mxattention · seed 0"):
        p.started(run)
        for _ in range(10):
            now[0] += 1.5
            p.step(10)
        p.run_done()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[     0.0 s] generate: 2 of 3 runs to do"
    # steps 3, 6, 9 and the last (10) of each run: ceil(10 / 4) = 3
    assert [l.split(": ", 1)[1] for l in lines[1:6]] == [
        "fp16 · seed 0: step 3/10", "fp16 · seed 0: step 6/10", "fp16 · seed 0: step 9/10",
        "fp16 · seed 0: step 10/10", "run 1/2 done (fp16 · seed 0)"]
    assert lines[-1] == "[    30.0 s] generate: run 2/2 done (mxattention · seed 0)"
    assert len(lines) == 11
