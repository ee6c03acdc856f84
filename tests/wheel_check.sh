#!/usr/bin/env bash
# The installed wheel is the product: build it, install it into a bare folder and use it from a
# temporary directory, with no source tree on sys.path (its dependencies come from the virtual
# environment). Then the same wheel, unpacked by nobody, as a zip on sys.path. Fails when a shipped
# recipe, study or prompt set is missing from the wheel, or is only found beside a checkout.
#   usage: tests/wheel_check.sh [PYTHON]      (default: .venv/bin/python; `make wheel-check`)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${1:-$repo/.venv/bin/python}
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")
work=$(mktemp -d "${TMPDIR:-/tmp}/wheel-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
say() { echo "wheel-check [${SECONDS} s]: $*"; }

# Build from a copy of the tracked and untracked-but-not-ignored files: setuptools' in-tree build/
# folder could otherwise carry files that no longer exist into the wheel.
mkdir "$work/src"
(cd "$repo" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work/src" 2>/dev/null || true)
log="$work/build.log"
# -v: pip shows the build backend's own warnings only when verbose
"$py" -m pip wheel -v "$work/src" --no-deps -w "$work/dist" >"$log" 2>&1 || { cat "$log"; exit 1; }
# setuptools' warnings (a deprecated key, a data folder left out); pip's own notes about its indexes
# and the build environment are not about the package
if grep -i -E "warning|deprecat" "$log" | grep -v -E "Location '.*' is ignored|dependency resolver|byte-compiling is disabled"; then
  say "the wheel build warns (above)"; exit 1
fi
wheel=$(ls "$work"/dist/lowbit_video-*.whl)
"$py" -m pip install -q --no-deps --no-index --target "$work/site" "$wheel"
say "built and installed $(basename "$wheel")"

# Every Python process below: the checkout's editable-install finder (a .pth in the venv) is taken out,
# so nothing can be found in the checkout; at exit, every lowbit_video module loaded must come from
# the installed folder (or, for the zip check, the wheel).
mkdir "$work/run" "$work/boot"
cat >"$work/boot/sitecustomize.py" <<'PY'
import atexit, os, sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
ROOT = os.environ["WHEEL_CHECK_ROOT"]

def _only_from_root():
    bad = sorted(f"{n}: {m.__file__}" for n, m in list(sys.modules.items())
                 if n.split(".")[0] == "lowbit_video" and getattr(m, "__file__", None)
                 and not os.path.realpath(m.__file__).startswith(os.path.realpath(ROOT) + os.sep))
    if bad:
        print("wheel-check: modules loaded from outside " + ROOT + ": " + ", ".join(bad), file=sys.stderr, flush=True)
        os._exit(3)

atexit.register(_only_from_root)
PY
cd "$work/run"
export PYTHONPATH="$work/site:$work/boot" WHEEL_CHECK_ROOT="$work/site" PYTHONSAFEPATH=1 LOWBIT_VIDEO_RECIPES=
n_recipes=$(ls "$repo"/recipes/*.toml | wc -l)
n_studies=$(ls "$repo"/recipes/ablations/*.toml | wc -l)
n_prompts=$(ls "$repo"/prompts/*.txt | wc -l)
lv() { "$py" -m lowbit_video "$@"; }

"$py" - "$work/site" <<'PY'
import sys
from pathlib import Path
site = Path(sys.argv[1]).resolve()
import lowbit_video, lowbit_video.kernels, lowbit_video.data.recipes, lowbit_video.data.prompts
for m in (lowbit_video, lowbit_video.kernels, lowbit_video.data.recipes, lowbit_video.data.prompts):
    assert Path(m.__file__).resolve().is_relative_to(site), f"{m.__name__} imported from {m.__file__}, not {site}"
assert not any((Path(p) / "recipes" / "fp16.toml").exists() for p in sys.path if p), "a source tree is on sys.path"
PY

lv recipes --json >recipes.json
"$py" - "$work/site" "$n_recipes" <<'PY'
import json, sys
site, n = sys.argv[1], int(sys.argv[2])
got = json.load(open("recipes.json"))
assert not got["errors"], got["errors"]
assert len(got["recipes"]) == n, f"{len(got['recipes'])} recipes listed, the checkout has {n}"
assert all(r["file"].startswith(site) for r in got["recipes"]), [r["file"] for r in got["recipes"]]
PY
lv recipes >/dev/null
say "recipes: all $n_recipes listed from the installed package"

lv ablate --list --json >studies.json
"$py" -c "import json, sys; s = json.load(open('studies.json'))['studies']; assert len(s) == $n_studies, s" 
say "ablate --list: all $n_studies studies"

lv generate --recipe fp16 --recipe mxattention --prompts smoke --prompt-limit 1 --steps 2 --out runs --json >gen.json
"$py" - <<'PY'
import json
from pathlib import Path
runs = json.load(open("gen.json"))["runs"]
assert [r["recipe"] for r in runs] == ["fp16", "mxattention"] and all(r["status"] == "done" for r in runs), runs
for r in runs:
    meta = json.loads((Path(r["dir"]) / "meta.json").read_text())
    assert meta["device"] in ("cpu", "cuda") and meta["steps"] == 2, meta["device"]
PY
lv evaluate runs --quiet >/dev/null
lv compare runs >compare.txt
grep -q mxattention compare.txt
say "generate (fp16, mxattention; prompt set smoke by name, 2 steps), evaluate, compare"

"$py" - <<'PY'
import torch
import lowbit_video
from lowbit_video.models.registry import load_model
from lowbit_video.models.tiny_shapes.sample import make_scheduler, sample
tiny = load_model("tiny-shapes").model
with torch.no_grad(), lowbit_video.use_recipe(tiny, "mxattention", scheduler=make_scheduler(tiny)) as handle:
    sample(tiny, ["a red circle moving right on a black background"], [0], steps=1)
assert handle.calls["quantized"] > 0, handle.calls
PY
say "use_recipe on the shipped model"

# The wheel itself (a zip) on sys.path: names, includes between files, studies and prompt sets
# resolve through importlib.resources without a file system path.
PYTHONPATH="$wheel:$work/boot" WHEEL_CHECK_ROOT="$wheel" "$py" - "$wheel" "$n_recipes" "$n_studies" "$n_prompts" <<'PY'
import sys
wheel, n_recipes, n_studies, n_prompts = sys.argv[1], *map(int, sys.argv[2:])
import lowbit_video
assert lowbit_video.__file__.startswith(wheel + "/"), lowbit_video.__file__
from lowbit_video import data
from lowbit_video.ablate import list_studies, load_study
from lowbit_video.generate import read_plain_prompts, resolve_prompts_file
from lowbit_video.recipes import available_recipes, load_all, load_recipe
assert len(available_recipes()) == n_recipes and all(str(f).startswith(wheel) for f in available_recipes().values())
good, broken = load_all()
assert len(good) == n_recipes and not broken, broken
mx = load_recipe("mxattention")  # includes base/mxattention.toml, which includes mxfp4-direct.toml
assert mx.attention.p.format == "mxfp4" and mx.attention.placement == "pnq" and mx.attention.q.rule == "uos"
ocp = load_recipe("mxfp4-ocp")  # includes base/mxfp4-direct.toml
assert ocp.attention.q.rule == "ocp" and ocp.attention.placement == "direct"
assert len(list_studies()) == n_studies and load_study("rowsum").kind == "rowsum"  # include = "base/capture.toml"
assert len(data.prompt_sets()) == n_prompts
assert read_plain_prompts(resolve_prompts_file("smoke")) == read_plain_prompts(resolve_prompts_file("prompts/smoke.txt"))
PY
say "zip on sys.path: recipes, includes, studies and prompt sets"
say "ok"
