#!/bin/bash
# Session 4, device call 9: GPU tests of sage2 (incl. TMA vs pointer loads), then the TMA sweep
# (results/scripts/tma_tune_h200.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "(sage or tma or pipelined) and not interpreter" 2>&1 | tee $OUT/pytest.log | tail -4
timeout 150 python3 results/scripts/tma_tune_h200.py $OUT/tma_tune.json 2>&1 | tee $OUT/tma_tune.log
rm -f lowbit_video/kernels
