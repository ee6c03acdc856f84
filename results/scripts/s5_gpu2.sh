#!/bin/bash
# Session 5, device call 2: GPU kernel tests after the two-FMA E2M1 rounding / per-row inexact count and the
# topk route; then `bench kernels` (MXFP4 recipes, sage2, dense; MX tile variants and the no-P-quant
# ablation) at wan-480p and wan-720p, and `bench draft --shapes wan-720p --no-sweep` (topk route).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py tests/test_kernels_draft.py -k "not interpreter" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 250 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels, to_markdown
b64 = dict(BLOCK_M=64, num_warps=4)
variants = {'mxattention[no-P-quant]': dict(recipe='mxattention', config={'PQ': False}),
            'mxattention[PIPE,3st]': dict(recipe='mxattention', config={'NUM_STAGES': 3}),
            'mxattention[BM64,PIPE,2st]': dict(recipe='mxattention', config=dict(b64, NUM_STAGES=2)),
            'mxattention[BM64,PIPE,3st]': dict(recipe='mxattention', config=dict(b64, NUM_STAGES=3))}
info = bench_kernels(['wan-480p', 'wan-720p'], ['mxattention', 'mxattention-no-uos', 'mxattention-no-pnq-uos', 'mxfp4-ocp',
                     'mxfp4-tfs', 'sage2-int8', 'fp16'], variants=variants, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_kernels.json', 'w'), indent=1)
print(to_markdown(info))
" 2>&1 | grep -v "^|" | tail -30
timeout 120 python3 -c "
import json, sys
from lowbit_video.bench.draft import bench_draft
info = bench_draft(['wan-720p'], sweep=False)
json.dump(info, open('$OUT/draft.json', 'w'), indent=1)
for r in info['rows']: print({k: r.get(k) for k in ('recipe', 'prepass_ms', 'route_ms', 'kernel_ms', 'total_ms', 'ratio_cudnn', 'rel_l2', 'density')})
" 2>&1 | tail -6
rm -f lowbit_video/kernels
