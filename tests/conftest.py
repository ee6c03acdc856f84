import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

# Tests are deterministic and small; two threads match the CI machine.
torch.set_num_threads(min(2, os.cpu_count() or 1))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; this machine has none (GPU figures live in results/)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def no_gpu(monkeypatch):
    """kernels/_launcher.py's view of the device as if one GPU were there (device 0, a stand-in stream, no Triton
    launch hook): for the CPU tests of direct launches with stand-in kernels (kernel_helpers.StandInJit)."""
    from lowbit_video.kernels import _launcher

    monkeypatch.setattr(_launcher, "_device", lambda: 0)
    monkeypatch.setattr(_launcher, "_stream", lambda device: "stream")
    monkeypatch.setattr(_launcher, "_hooked", lambda: False)
