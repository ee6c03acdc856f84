#!/bin/bash
# Session 7, call 9: the MXFP4 V pre-pass with the channel fold exponents from one torch.aminmax reduction instead
# of a pass of token tiles. GPU tests of the MXFP4 pre-pass and kernels; the pre-pass piece by piece
# (results/scripts/mx_prepass_pieces.py); bench mxattention (Triton and GLUON). Steps in order of priority, each
# with its own limit, since this call had ~4 minutes of device time left.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 70 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_attention.py \
  -k "not interpreter and not sage and (test_prepass_is_bit_exact_against_formats or test_kernel_matches_reference or spread or tiny_p or gluon_mx)" 2>&1 | tee $OUT/pytest.log | tail -2
timeout 45 python3 results/scripts/mx_prepass_pieces.py > $OUT/prepass_pieces.json 2> $OUT/prepass.err; tail -c 300 $OUT/prepass.err
timeout 80 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
v = {'mxattention[GLUON]': dict(recipe='mxattention', config={'GLUON': True})}
info = bench_kernels(['wan-480p', 'wan-720p'], ['mxattention'], variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_vprepass.json', 'w'), indent=1)
" 2>&1 | grep "mx\|cudnn" | tail -6
rm -f lowbit_video/kernels
