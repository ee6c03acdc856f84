#!/bin/bash
# Session 4, device call 6: automatic warp specialization probe (results/scripts/ws_probe_h200.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 400 python3 results/scripts/ws_probe_h200.py $OUT/ws_probe.json 2>&1 | tee $OUT/ws_probe.log
rm -f lowbit_video/kernels
