"""The kinds of study: each kind's name -> its parameters (read from its own table of the study
file), how it runs, and what the terminal shows of its result.

A new kind is its module (parameters, run, render) and one entry here; the loader
(lowbit_video/ablate/studies.py), `run_study` and `lowbit-video ablate` (its --help included) read
this table and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..toml_schema import Where
from . import qmax_sweep, recipe_table, rowsum, table3
from .common import AblateOptions, Reporter, written_markdown
from .recipe_table_params import pooling_parameters, rotate_parameters
from .study import CaptureParams, Study


@dataclass(frozen=True)
class StudyKind:
    name: str
    about: str  # one line for `lowbit-video ablate --help`
    section: str  # the kind's own table in a study file ([table3], [qmax], ...)
    captures: bool  # reads captured Q/K/V: takes a [capture] table (passed to `parameters`)
    parameters: Callable[[Where, str, Any, CaptureParams | None], Any]  # (where, key prefix, its table, capture)
    run: Callable[[Study, AblateOptions, Reporter | None], dict]
    render: Callable[[dict], str]  # the terminal's view of a finished result (every output written)


KINDS: dict[str, StudyKind] = {k.name: k for k in (
    StudyKind("table3", "the MXAttention paper's Table 3: Full / w/o UOS / w/o PNQ and UOS / OCP MXFP4, fully 4-bit",
              "table3", False, table3.parameters, table3.run, written_markdown),
    StudyKind("qmax-sweep", "Table 4: per-block MSE-optimal Q_max on captured Q/K/V",
              "qmax", True, qmax_sweep.parameters, qmax_sweep.run, qmax_sweep.render),
    StudyKind("rowsum", "Figure 7: row sums of MXFP4-quantized attention probabilities",
              "rowsum", True, rowsum.parameters, rowsum.run, rowsum.render),
    StudyKind("rotate-table", "RotateAttention's main table and ablation: INT4 baseline, range-rectified P̃, "
              "half / interleaved / full rotation, a non-orthogonal control; videos and operator level",
              "rotate", True, rotate_parameters, recipe_table.run, written_markdown),
    StudyKind("draft-pooling", "DraftAttention2's Table 3, average vs average + max pooled draft, and Figure 5, "
              "error at equal budget", "pooling", True, pooling_parameters, recipe_table.run, written_markdown),
)}
