#!/bin/bash
# Session 7 device calls on the Gluon kernel (kernels/gluon_ws.py, config GLUON) and the MXFP4 pre-pass, against
# the Triton kernel in the same run. Steps, in order, each switched by a variable:
#   GPU tests      TESTS=1, TEST_FILES, TESTS_K (a pytest -k expression)
#   pre-pass       PIECES=1: results/scripts/mx_prepass_pieces.py (mxattention's pre-pass piece by piece)
#   bench kernels  SHAPES, RECIPES (each also with GLUON, and with GLUON and NUM_STAGES=$ALT_STAGES if set);
#                  RECIPES="" skips it
#   e2e            E2E_RES (8 blocks, launch._config patched so the model's attention calls take GLUON)
# Each call ran this script, or one with the same steps, on the commit named in results/kernels-h200.md,
# "Session 7":
#   call 1 (c650554): SHAPES="wan-480p wan-720p" E2E_RES=720p
#   call 4 (242a0bd): RECIPES= E2E_RES=                       (then: bash results/scripts/s7_ncu.sh 2)
#   call 5 (88cc66b): TEST_FILES="tests/test_kernels_attention.py tests/test_kernels_draft.py tests/test_kernel_config.py"
#                     TESTS_K="not interpreter" RECIPES= E2E_RES=
#   call 6 (7625aff): SHAPES="wan-480p wan-720p" RECIPES=mxattention ALT_STAGES= E2E_RES= (+ ncu of mx-gluon)
#   call 7 (reverted kernel): SHAPES="wan-480p wan-720p" RECIPES="mxattention mxattention-no-uos
#                     mxattention-no-pnq-uos mxfp4-ocp mxfp4-tfs" ALT_STAGES= E2E_RES= PIECES=1
#   call 8 (final kernel): SHAPES="wan-480p wan-720p" RECIPES="mxattention mxfp4-ocp" ALT_STAGES= E2E_RES=
#   call 9 (aminmax pre-pass): TESTS_K="not interpreter and not sage and (test_prepass_is_bit_exact_against_formats
#                     or test_kernel_matches_reference or spread or tiny_p or gluon_mx)" PIECES=1
#                     SHAPES="wan-480p wan-720p" RECIPES=mxattention ALT_STAGES= E2E_RES=
set -o pipefail
SHAPES=${SHAPES-"wan-480p wan-720p hunyuan-720p"}
RECIPES=${RECIPES-"mxattention sage2-int8"}
ALT_STAGES=${ALT_STAGES-2}
E2E_RES=${E2E_RES-"480p 720p"}
TEST_FILES=${TEST_FILES-tests/test_kernels_attention.py}
TESTS_K=${TESTS_K-gluon}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
if [ "${TESTS:-1}" = 1 ]; then
  timeout 540 python3 -m pytest -q -rfE -p no:cacheprovider $TEST_FILES -k "$TESTS_K" 2>&1 | tee $OUT/pytest.log | tail -4
fi
if [ "${PIECES:-0}" = 1 ]; then
  timeout 100 python3 results/scripts/mx_prepass_pieces.py > $OUT/prepass_pieces.json 2> $OUT/prepass.err
  tail -c 400 $OUT/prepass.err
fi
if [ -n "$RECIPES" ]; then
timeout 300 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
recipes = '$RECIPES'.split()
v = {}
for r in recipes:
    v[r + '[GLUON]'] = dict(recipe=r, config={'GLUON': True})
    if '$ALT_STAGES':
        v[r + '[GLUON,NUM_STAGES=$ALT_STAGES]'] = dict(recipe=r, config={'GLUON': True, 'NUM_STAGES': int('$ALT_STAGES')})
info = bench_kernels('$SHAPES'.split(), recipes, variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_gluon.json', 'w'), indent=1)
" 2>&1 | grep "cudnn\|\[GLUON\|$(echo $RECIPES | tr ' ' '\n' | head -1)" | tail -40
fi
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
