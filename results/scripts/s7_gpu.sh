#!/bin/bash
# Session 7: the warp-specialized Gluon kernel (kernels/gluon_ws.py, config GLUON) for the MXFP4 recipes and
# sage2-int8, against the Triton kernel in the same run. Each device call ran this script on one commit (named in
# results/kernels-h200.md, "Session 7"). Steps: GPU tests (-k gluon); bench kernels ($SHAPES) for $RECIPES with
# and without GLUON (and GLUON with NUM_STAGES=$ALT_STAGES); e2e ($E2E_RES, 8 blocks) with the Triton kernel and
# with GLUON (launch._config patched so the model's attention calls take GLUON: e2e has no per-call config).
set -o pipefail
SHAPES=${SHAPES:-"wan-480p wan-720p hunyuan-720p"}
RECIPES=${RECIPES:-"mxattention sage2-int8"}
ALT_STAGES=${ALT_STAGES:-2}
E2E_RES=${E2E_RES:-"480p 720p"}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
if [ "${TESTS:-1}" = 1 ]; then
timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_attention.py -k "gluon" 2>&1 | tee $OUT/pytest.log | tail -4
fi
timeout 300 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
recipes = '$RECIPES'.split()
v = {}
for r in recipes:
    v[r + '[GLUON]'] = dict(recipe=r, config={'GLUON': True})
    v[r + '[GLUON,NUM_STAGES=$ALT_STAGES]'] = dict(recipe=r, config={'GLUON': True, 'NUM_STAGES': $ALT_STAGES})
info = bench_kernels('$SHAPES'.split(), recipes, variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_gluon.json', 'w'), indent=1)
for r in info['rows']:
    print(r['shape'], r['recipe'], round(r['tflops'], 1), round(r['ratio_cudnn'], 3))
" 2>&1 | grep -v "^ *$" | grep -iv "warn" | tail -40
if [ -n "$E2E_RES" ]; then
timeout 200 python3 -c "
import json, sys
import lowbit_video.kernels.launch as L
from lowbit_video.bench.e2e import bench_e2e
recipes = '$RECIPES'.split()
res = '$E2E_RES'.split()
rows = bench_e2e(res, recipes, blocks=8, reps=2, log=lambda m: print(m, file=sys.stderr))
orig = L._config
L._config = lambda variant, d: dict(orig(variant, d), GLUON=True) if variant in ('sage', 'mx') else orig(variant, d)
rows += [dict(r, recipe=r['recipe'] + '[GLUON]') for r in bench_e2e(res, recipes, blocks=8, reps=2,
         log=lambda m: print(m, file=sys.stderr)) if r['recipe'] != 'sdpa-cudnn']
json.dump(rows, open('$OUT/e2e_gluon.json', 'w'), indent=1)
for r in rows:
    print('e2e', r['resolution'], r['recipe'], round(r['ms'], 2), r.get('x_cudnn'))
" 2>&1 | grep "^e2e\|Error\|error" | head -20
fi
rm -f lowbit_video/kernels
