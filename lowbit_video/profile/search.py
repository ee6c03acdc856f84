"""The `psnr=P` budget: the fewest most-sensitive cells whose clips reach P dB against the 16-bit clips.

Keeping the k most sensitive cells (the profile's ranking) in 16 bit is taken to raise the PSNR with k (more
calls in 16 bit, and the most harmful first); keeping all of them gives the 16-bit clips themselves, which
always meet the target. So the search is a bisection over k between the largest k known to miss the target and
the smallest known to meet it, at most `max_evals` generations; it returns the smallest k that met it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Trial:
    kept: int  # cells kept in 16 bit (the first `kept` of the ranking)
    psnr: float  # mean PSNR of the candidate's clips against the 16-bit clips, dB
    meets: bool


def search_kept(n_cells: int, score: Callable[[int], float], target: float, *,
                max_evals: int = 6) -> tuple[int, list[Trial]]:
    """(the smallest number of kept cells found to reach `target`, the trials in order). `score(k)`: mean PSNR
    with the k most sensitive cells kept in 16 bit. k = n_cells (everything in 16 bit) is taken to meet it
    without a generation (its clips are the 16-bit ones)."""
    trials: list[Trial] = []
    lo, hi = -1, n_cells  # lo: largest k seen to miss (-1: none), hi: smallest k known to meet
    candidates = [0]  # quantizing every cell first: often it already meets a loose target
    while len(trials) < max_evals and hi - lo > 1:
        k = candidates.pop() if candidates else (lo + hi) // 2
        value = score(k)
        ok = value >= target
        trials.append(Trial(k, value, ok))
        if ok:
            hi = k
        else:
            lo = k
    return hi, trials


__all__ = ["Trial", "search_kept"]
