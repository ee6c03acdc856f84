"""GPU run behind the DraftAttention2 rows of results/kernels-h200.{md,json} and results/draft-h200-*.png:
`lowbit_video.bench.draft.bench_draft` (what `lowbit-video bench draft` calls).
Usage: python results/scripts/bench_draft_h200.py OUT.json SWEEP_SHAPE [ROWS_ONLY_SHAPE ...]"""

import json
import sys

from lowbit_video.bench.draft import bench_draft
from lowbit_video.bench.kernels import _driver_version

out, sweep_shape, more = sys.argv[1], sys.argv[2], sys.argv[3:]
import torch, triton

info = bench_draft([sweep_shape], sweep=True)
meta = {"gpu": torch.cuda.get_device_name(), "driver": _driver_version(), "torch": torch.__version__,
        "triton": triton.__version__}
info.update(meta)
json.dump(info, open(out, "w"), indent=1)
if more:
    extra = bench_draft(more, sweep=False)
    for key in ("rows", "baselines"):
        info[key] += extra[key]
    json.dump(info, open(out, "w"), indent=1)
