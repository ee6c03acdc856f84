# lowbit-video — set-up and everyday commands. Everything runs in a local virtual environment.
#   make demo   install, then run the main job on the shipped default
#   make test   install with test extras, then run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# CPU machines get the CPU build of torch from the local wheel cache; a venv that already has a
# torch (e.g. a CUDA build) keeps it.
TORCH_CPU ?= torch==2.13.0

.PHONY: install demo test test-all clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q $(TORCH_CPU)
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# Main job. Until the shipped text-to-video model lands, it is the attention diagnostic over every
# recipe on video-like (3D-RoPE'd, outlier-heavy) Q/K/V.
demo: install
	$(BIN)/lowbit-video diagnose attention --outliers --seq 2048
	$(BIN)/lowbit-video diagnose uos

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build *.egg-info
