#!/bin/bash
# Session 4, device calls 1-2 (CALL=1|2): PIPE / tile sweep and the FP8 load probe (results/scripts/pipe_tune_h200.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CALL=${CALL:-1} timeout 540 python3 results/scripts/pipe_tune_h200.py $OUT/pipe_tune.json 2>&1 | tee $OUT/pipe_tune.log
rm -f lowbit_video/kernels
