#!/bin/bash
# Session 5, device call 1: every GPU kernel test with the current defaults (after the TMA-option change),
# then the leave-one-stage-out breakdown at wan-720p, compiled-kernel resources and the route ranking probe.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py tests/test_kernels_draft.py -k "not interpreter" 2>&1 | tee $OUT/pytest.log | tail -8
timeout 220 python3 results/scripts/s5_breakdown_h200.py $OUT/breakdown.json 2>&1 | tail -30
rm -f lowbit_video/kernels
