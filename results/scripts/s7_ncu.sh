#!/bin/bash
# Session 7: Nsight Compute (`ncu --set full`, raw page as CSV) on one call of each kernel at B=1, H=16,
# N=16384, D=128 (results/scripts/ncu_target.py): where the time goes, per pipe and per stall reason.
# Summarised by results/scripts/ncu_summary.py into results/ncu-h200.md.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
run() {  # label, kernel-name regex, target args...
  local label=$1 rx=$2; shift 2
  timeout 120 ncu --set full --page raw --csv -k regex:"$rx" -c 1 python3 results/scripts/ncu_target.py "$@" \
    > $OUT/ncu_$label.csv 2> $OUT/ncu_$label.err
  echo "$label rc=$? $(wc -c < $OUT/ncu_$label.csv) bytes; $(grep -c ERR $OUT/ncu_$label.err) ERR lines"
}
run sdpa-cudnn "cudnn|sm90|flash|fmha|attn" sdpa-cudnn
run mx-triton "attn_fwd" mxattention
run mx-gluon "attn_ws_fwd" mxattention GLUON=True
run sage-triton "attn_fwd" sage2-int8
run sage-gluon "attn_ws_fwd" sage2-int8 GLUON=True
run dense-triton "attn_fwd" fp16
head -c 600 $OUT/ncu_mx-triton.err
rm -f lowbit_video/kernels
