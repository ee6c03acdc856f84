#!/usr/bin/env sh
# Install VBench 0.1.5 and what its seven custom-input dimensions really import into an EXISTING venv,
# WITHOUT vbench's pins (numpy<2, transformers==4.33.2, ...): the main environment stays on numpy 2 and
# modern transformers. The two incompatibilities left are shimmed at run time by
# lowbit_video/metrics/vbench_worker.py (pkg_resources.packaging for openai-clip, numpy.lib.function_base
# for UMT). Weights are never downloaded; see `lowbit-video weights check`.
#
#   sh scripts/install-vbench.sh [PIP]        (default PIP: .venv/bin/pip)
#
# --no-deps: vbench (its pins), pyiqa 0.1.16 (0.1.10+ pulls ~25 packages; 0.1.16 runs MUSIQ on numpy 2),
# decord 0.6.0 (x86_64 manylinux wheels only: elsewhere VBench stays unavailable, reported as a missing
# python package). The rest are resolved normally but are already-satisfied-or-small: opencv (video
# reading), omegaconf (AMT config), easydict (RAFT), openai-clip + ftfy + regex (CLIP dims), timm 1.0.12
# and einops (UMT / ViCLIP; vbench requires timm<=1.0.12). fairscale is only used by `scene` (Tag2Text),
# which needs transformers 4.x anyway, so it is left out.
set -eu
PIP="${1:-.venv/bin/pip}"
PY="$(dirname "$PIP")/python"
"$PIP" install -q --no-deps vbench==0.1.5 pyiqa==0.1.16
"$PIP" install -q --no-deps decord==0.6.0 || echo "warning: decord 0.6.0 has no wheel for this platform; VBench dimensions will be reported unavailable" >&2
"$PIP" install -q opencv-python-headless omegaconf easydict "timm==1.0.12" einops ftfy regex openai-clip
"$PY" -m lowbit_video.metrics.vbench_worker --check || echo "warning: some VBench dimensions do not import (see above); they will be reported unavailable" >&2
