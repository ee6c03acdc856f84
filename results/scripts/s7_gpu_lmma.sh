#!/bin/bash
# Session 7, call 7: the MX Gluon kernel with ℓ from an MMA against ones (PNQ; offline key loop 952 -> 894; it failed the
# reference test for mxattention and ran slower, so it was reverted
# instructions). GPU tests -k gluon; bench every MXFP4 recipe with and without GLUON at wan-480p / wan-720p;
# the mxattention pre-pass piece by piece (results/scripts/mx_prepass_pieces.py).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_attention.py -k "gluon" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 300 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
rec = ['mxattention', 'mxattention-no-uos', 'mxattention-no-pnq-uos', 'mxfp4-ocp', 'mxfp4-tfs']
v = {r + '[GLUON]': dict(recipe=r, config={'GLUON': True}) for r in rec}
info = bench_kernels(['wan-480p', 'wan-720p'], rec, variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_lmma.json', 'w'), indent=1)
" 2>&1 | grep "mx\|cudnn" | tail -24
timeout 100 python3 results/scripts/mx_prepass_pieces.py > $OUT/prepass_pieces.json 2> $OUT/prepass.err; tail -c 400 $OUT/prepass.err
head -2 $OUT/prepass_pieces.json
rm -f lowbit_video/kernels
