#!/bin/bash
# Session 7, call 8: the MX Gluon kernel (per-block work once per block, call 6) with the tile's row sums as a
# short tree instead of one 31-deep chain of dependent adds per row (same instruction count, offline 952).
# GPU tests -k gluon; bench mxattention (PNQ) and mxfp4-ocp (direct placement) with and without GLUON.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_attention.py -k "gluon" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
rec = ['mxattention', 'mxfp4-ocp']
v = {r + '[GLUON]': dict(recipe=r, config={'GLUON': True}) for r in rec}
info = bench_kernels(['wan-480p', 'wan-720p'], rec, variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_tree.json', 'w'), indent=1)
" 2>&1 | grep "mx\|cudnn" | tail -12
rm -f lowbit_video/kernels
