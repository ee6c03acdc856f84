#!/bin/bash
# Session 4, device call 3: GPU kernel tests after the PIPE refactor and the new tile defaults, then the
# draft PIPE sweep (results/scripts/draft_pipe_h200.py).
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 330 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_attention.py tests/test_kernels_draft.py -k "not interpreter" 2>&1 | tee $OUT/pytest.log | tail -15
timeout 200 python3 results/scripts/draft_pipe_h200.py $OUT/draft_pipe.json 2>&1 | tee $OUT/draft_pipe.log
rm -f lowbit_video/kernels
