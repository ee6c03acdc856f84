#!/bin/bash
# Session 6, device call 3: the warp-specialized Gluon probe (two 64-row consumer warpgroups sharing K/Vᵀ stages,
# a one-warp TMA loader; with and without FlashAttention-3's ping-pong turns) against cuDNN bf16 and the
# single-partition probe, plain FP8, kernel only. Each row is written as soon as it is measured.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 240 python3 results/scripts/gluon_probe.py $OUT/gluon_ws.json --ws 2>&1 | tail -20
rm -f lowbit_video/kernels
