# lowbit-video — set-up and everyday commands. Everything runs in a local virtual environment.
#   make demo   install, then run the main job (generation with the shipped model)
#   make test   install with test extras, then run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# torch + torchvision as a pair that imports together (PyPI's torchvision does not import beside the
# torch 2.13 CPU build); a venv that already has both (e.g. a CUDA build) keeps them.
TORCH ?= torch==2.14.1 torchvision==0.29.1

.PHONY: install demo diagnose test smoke wheel-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml scripts/install-vbench.sh | $(BIN)/python
	$(BIN)/python -c "import torch, torchvision" 2>/dev/null || $(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[test]'
	# VBench without its pins (numpy<2, transformers==4.33): see the script's header
	sh scripts/install-vbench.sh $(BIN)/pip
	touch $@

install: $(VENV)/.installed

# Main job: generate paired FP16 / MXAttention clips with the shipped tiny-shapes model on the smoke
# prompts, score them against each other and print the comparison. Runs are resumable (a rerun skips them).
DEMO_OUT ?= runs/demo
demo: install
	$(BIN)/lowbit-video generate --recipe fp16 --recipe mxattention --prompts prompts/smoke.txt --seeds 0 --out $(DEMO_OUT)
	$(BIN)/lowbit-video evaluate $(DEMO_OUT) --quiet
	$(BIN)/lowbit-video compare $(DEMO_OUT)

# Attention numerics of every recipe on video-like synthetic Q/K/V (no model needed).
diagnose: install
	$(BIN)/lowbit-video diagnose attention --outliers --seq 2048
	$(BIN)/lowbit-video diagnose uos

# CI smoke: generate -> evaluate -> compare -> ablate table3 on the smoke prompts at the model's
# default 12 steps (quantized recipes run on the CPU path, lowbit_video/attention/cpu_path.py).
SMOKE_OUT   ?= runs/smoke
SMOKE_STEPS ?= 12
smoke: install
	$(BIN)/lowbit-video generate --recipe fp16 --recipe mxattention --prompts prompts/smoke.txt --seeds 0 --steps $(SMOKE_STEPS) --out $(SMOKE_OUT)
	$(BIN)/lowbit-video evaluate $(SMOKE_OUT) --quiet
	$(BIN)/lowbit-video compare $(SMOKE_OUT) --format md --out $(SMOKE_OUT)/compare.md --plots $(SMOKE_OUT)/plots
	$(BIN)/lowbit-video ablate table3 --prompts prompts/smoke.txt --seeds 0 --steps $(SMOKE_STEPS) --out $(SMOKE_OUT)
	test -s $(SMOKE_OUT)/compare.md && test -s $(SMOKE_OUT)/table3.md && test -s $(SMOKE_OUT)/table3.json
	@echo "smoke: ok ($(SMOKE_OUT)/compare.md, $(SMOKE_OUT)/plots, $(SMOKE_OUT)/table3.md)"

# The installed wheel as a user gets it: build, install into a bare folder, run recipes, ablate --list,
# generate (fp16, mxattention; 2 steps, one prompt), evaluate, compare and use_recipe from a temporary
# directory with no source tree on sys.path, then resolve names from the wheel as a zip (tests/wheel_check.sh).
wheel-check: install
	bash tests/wheel_check.sh $(BIN)/python

# Two workers, one test file each at a time (--dist loadfile: a file's fixtures and run folders stay in one
# process): 14 min on 2 cores. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

clean:
	rm -rf $(VENV) build *.egg-info
