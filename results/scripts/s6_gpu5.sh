#!/bin/bash
# Session 6, device call 5: the Gluon sage2 kernel with the key scales loaded one tile ahead (call 4 measured it
# at 0.50x cuDNN with a load used at once in every tile). GPU tests, then
#   lowbit-video bench kernels --shapes wan-480p wan-720p --recipes sage2-int8 --config GLUON=true --json
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "gluon" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 150 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
v = {'sage2-int8[GLUON=True]': dict(recipe='sage2-int8', config={'GLUON': True})}
info = bench_kernels(['wan-480p', 'wan-720p'], ['sage2-int8'], variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_gluon.json', 'w'), indent=1)
" 2>&1 | grep -v "^|" | grep "sage2" | tail -6
rm -f lowbit_video/kernels
