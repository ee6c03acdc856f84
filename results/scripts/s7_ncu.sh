#!/bin/bash
# Session 7: Nsight Compute (`ncu --set full`, raw page as CSV) on one call of each named kernel at B=1, H=16,
# N=16384, D=128 (results/scripts/ncu_target.py), packed into $OUT/ncu.tgz (a call returns at most 8 files).
# Summarised by results/scripts/ncu_summary.py; the CSVs are kept gzipped in results/ncu/.
#   call 3: bash results/scripts/s7_ncu.sh sdpa-cudnn mx-triton mx-gluon sage-triton sage-gluon dense-triton
#   call 4: bash results/scripts/s7_ncu.sh sdpa-cudnn sage-triton mx-gluon-stages4 probe-ws
#   call 6: bash results/scripts/s7_ncu.sh mx-gluon-quad   (the per-block-once kernel, after s7_gpu.sh)
#   session 8, call 6: bash results/scripts/s7_ncu.sh sage-gluon-s8 mx-gluon-s8   (operand key order, TMA key
#   scales; GLUON is the default since session 8, so the Triton labels pass GLUON=False)
# (calls 3 and 4 ran the same steps from two scripts; call 3's CSVs for sage-triton and sdpa-cudnn were lost to
# the 8-file limit and re-made in call 4)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
mkdir -p /tmp/ncu
for label in "$@"; do
  case $label in  # kernel-name regex, then ncu_target.py's arguments
    sdpa-cudnn) set -- "cudnn|sm90|flash|fmha|attn" sdpa-cudnn ;;
    mx-triton) set -- attn_fwd mxattention GLUON=False ;;
    mx-gluon|mx-gluon-quad|mx-gluon-s8) set -- attn_ws_fwd mxattention GLUON=True ;;
    mx-gluon-stages4) set -- attn_ws_fwd mxattention GLUON=True NUM_STAGES=4 ;;
    sage-triton) set -- attn_fwd sage2-int8 GLUON=False ;;
    sage-gluon|sage-gluon-s8) set -- attn_ws_fwd sage2-int8 GLUON=True ;;
    dense-triton) set -- attn_fwd fp16 ;;
    probe-ws) set -- probe probe-ws ;;
    *) echo "unknown kernel label $label"; continue ;;
  esac
  rx=$1; shift
  timeout 120 ncu --set full --page raw --csv -k regex:"$rx" -c 1 python3 results/scripts/ncu_target.py "$@" \
    > /tmp/ncu/ncu_$label.csv 2> /tmp/ncu/ncu_$label.err
  echo "$label rc=$? $(wc -c < /tmp/ncu/ncu_$label.csv) bytes"
done
tar czf $OUT/ncu.tgz -C /tmp/ncu .
rm -f lowbit_video/kernels
