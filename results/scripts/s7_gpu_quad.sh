#!/bin/bash
# Session 7, call 6: does the MX Gluon kernel with per-block work once per block (key loop 998 -> 952
# instructions, offline) run faster in proportion? GPU tests -k gluon; bench mxattention with and without GLUON at
# wan-480p / wan-720p; ncu of the new kernel (instructions, issue use) as in s7_ncu.sh.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_attention.py -k "gluon" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
v = {'mxattention[GLUON]': dict(recipe='mxattention', config={'GLUON': True})}
info = bench_kernels(['wan-480p', 'wan-720p'], ['mxattention'], variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_quad.json', 'w'), indent=1)
" 2>&1 | grep "mxattention\|cudnn" | tail -8
timeout 100 ncu --set full --page raw --csv -k regex:"attn_ws_fwd" -c 1 python3 results/scripts/ncu_target.py mxattention GLUON=True \
  > $OUT/ncu_mx-gluon-quad.csv 2> /dev/null; echo "ncu rc=$?"
rm -f lowbit_video/kernels
