#!/bin/bash
# Session 5, device call 6: the pre-pass GPU tests after the shared _token_tile / _rotate refactor.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py tests/test_kernels_draft.py -k "prepass and not interpreter" 2>&1 | tee $OUT/pytest_prepass.log | tail -3
rm -f lowbit_video/kernels
