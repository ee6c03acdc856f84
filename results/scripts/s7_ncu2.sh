#!/bin/bash
# Session 7, second profile call: as s7_ncu.sh for the kernels whose CSVs the first call could not bring back
# (a call returns at most 8 files: this one packs them into one tarball), plus the plain FP8 Gluon probe.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "gluon" 2>&1 | tee $OUT/pytest.log | tail -3
mkdir -p /tmp/ncu
run() {  # label, kernel-name regex, target args...
  local label=$1 rx=$2; shift 2
  timeout 120 ncu --set full --page raw --csv -k regex:"$rx" -c 1 python3 results/scripts/ncu_target.py "$@" \
    > /tmp/ncu/ncu_$label.csv 2> /tmp/ncu/ncu_$label.err
  echo "$label rc=$? $(wc -c < /tmp/ncu/ncu_$label.csv) bytes"
}
run sdpa-cudnn "cudnn|sm90|flash|fmha|attn" sdpa-cudnn
run sage-triton "attn_fwd" sage2-int8
run mx-gluon-stages4 "attn_ws_fwd" mxattention GLUON=True NUM_STAGES=4
run probe-ws "probe" probe-ws
tar czf $OUT/ncu2.tgz -C /tmp/ncu .
rm -f lowbit_video/kernels
