#!/bin/bash
# The device calls of sessions 8 and 9 (s8_gpu.sh until d873ad3), each step switched by a variable:
#   GPU tests      TESTS=1, TEST_FILES, TESTS_K (a pytest -k expression)
#   pre-pass       SAGE_PIECES=1: results/scripts/sage_prepass_pieces.py (the sage2 pre-pass piece by piece);
#                  INT4_PIECES=1: results/scripts/int4_prepass_pieces.py (rotateattention-half's, and its ΔS table)
#   unrotate       UNROTATE=1: results/scripts/unrotate_h200.py (the Gluon INT4 output's V-Hadamard undo, timed)
#   bench kernels  SHAPES, RECIPES (those in TRITON_RECIPES, default all, also as "recipe[GLUON=False]", the
#                  Triton kernel, if TRITON_ROWS=1; and as "recipe[K=V,...]" with the kernel config VARIANT_CONFIG,
#                  e.g. "DEFER=true", if set; VARIANTS="r1,r2:K=V K=V;r3:K=V" adds several such rows, each
#                  group for its own recipes); RECIPES="" skips it
#   e2e            E2E_RES, E2E_RECIPES (8 blocks; the default kernels, and the Triton kernel if TRITON_ROWS=1)
# Each call's settings and commit are in results/kernels-h200.md, sections "Session 8" to "Session 12".
set -o pipefail
SHAPES=${SHAPES-"wan-480p wan-720p hunyuan-720p"}
RECIPES=${RECIPES-"mxattention sage2-int8"}
E2E_RES=${E2E_RES-"480p 720p"}
E2E_RECIPES=${E2E_RECIPES-"sage2-int8 mxattention"}
TRITON_ROWS=${TRITON_ROWS-1}
TRITON_RECIPES=${TRITON_RECIPES-$RECIPES}
TEST_FILES=${TEST_FILES-tests/test_kernels_attention.py}
TESTS_K=${TESTS_K-gluon}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
if [ "${TESTS:-1}" = 1 ]; then
  timeout ${TEST_LIMIT:-540} python3 -m pytest -q -rfE -p no:cacheprovider $TEST_FILES -k "$TESTS_K" 2>&1 | tee $OUT/pytest.log | tail -6
  echo "pytest: $(grep -o '\.' $OUT/pytest.log | wc -l) dots, $(grep -c '^FAILED' $OUT/pytest.log) FAILED lines"
fi
if [ "${SAGE_PIECES:-0}" = 1 ]; then
  timeout 120 python3 results/scripts/sage_prepass_pieces.py > $OUT/sage_pieces.json 2> $OUT/sage_pieces.err
  cat $OUT/sage_pieces.json; tail -c 400 $OUT/sage_pieces.err
fi
if [ "${INT4_PIECES:-0}" = 1 ]; then
  timeout 200 python3 results/scripts/int4_prepass_pieces.py > $OUT/int4_pieces.json 2> $OUT/int4_pieces.err
  cat $OUT/int4_pieces.json; tail -c 600 $OUT/int4_pieces.err
fi
if [ "${UNROTATE:-0}" = 1 ]; then
  timeout 60 python3 results/scripts/unrotate_h200.py > $OUT/unrotate.json 2> $OUT/unrotate.err
  cat $OUT/unrotate.json; tail -c 400 $OUT/unrotate.err
fi
if [ -n "$RECIPES" ]; then
timeout ${BENCH_LIMIT:-300} python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
recipes = '$RECIPES'.split()
from lowbit_video.bench.kernels import config_variants
v = {r + '[GLUON=False]': dict(recipe=r, config={'GLUON': False}) for r in '$TRITON_RECIPES'.split()} if '$TRITON_ROWS' == '1' else {}
v.update(config_variants('$TRITON_RECIPES'.split(), '${VARIANT_CONFIG:-}'.split()))
for group in '${VARIANTS:-}'.split(';'):  # 'recipe,recipe:K=V K=V;...': several config rows in one run
    if group.strip():
        rs, items = group.split(':')
        v.update(config_variants(rs.split(','), items.split()))
info = bench_kernels('$SHAPES'.split(), recipes, variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench.json', 'w'), indent=1)
" 2>&1 | grep "x[0-9.]* cuDNN\|sdpa-cudnn\|Error" | tail -60
fi
if [ -n "$E2E_RES" ]; then
timeout ${E2E_LIMIT:-200} python3 -c "
import json, sys
import lowbit_video.kernels.launch as L
from lowbit_video.bench.e2e import bench_e2e
recipes = '$E2E_RECIPES'.split()
res = '$E2E_RES'.split()
rows = bench_e2e(res, recipes, blocks=8, reps=3, log=lambda m: print(m, file=sys.stderr))
if '$TRITON_ROWS' == '1':
    orig = L._config
    L._config = lambda variant, *a: dict(orig(variant, *a), GLUON=False) if variant in ('sage', 'mx') else orig(variant, *a)
    rows += [dict(r, recipe=r['recipe'] + '[GLUON=False]') for r in bench_e2e(res, recipes, blocks=8, reps=3,
             log=lambda m: print(m, file=sys.stderr)) if r['recipe'] != 'sdpa-cudnn']
json.dump(rows, open('$OUT/e2e.json', 'w'), indent=1)
for r in rows:
    print('e2e', r['resolution'], r['recipe'], round(r['ms'], 2), r.get('x_cudnn'))
" 2>&1 | grep "^e2e\|Error\|error" | head -20
fi
rm -f lowbit_video/kernels
