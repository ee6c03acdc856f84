#!/bin/bash
# Session 7, last device call: every GPU kernel test on the final tree (the attention kernels, Triton and Gluon,
# and the DraftAttention2 kernels), without the CPU-interpreter tests (CI runs those).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 540 python3 -m pytest -q -rfE -p no:cacheprovider tests/test_kernels_attention.py tests/test_kernels_draft.py \
  tests/test_kernel_config.py -k "not interpreter" 2>&1 | tee $OUT/pytest.log | grep -v "^SKIPPED" | tail -8
rm -f lowbit_video/kernels
