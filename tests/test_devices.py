"""`--device auto`: CUDA when torch sees a GPU, else the CPU; explicit names kept; others refused."""

import pytest
import torch

from lowbit_video.devices import resolve_device
from lowbit_video.errors import UserError


@pytest.mark.parametrize("cuda,expected", [(False, "cpu"), (True, "cuda")])
def test_auto_follows_what_torch_sees(monkeypatch, cuda, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert resolve_device("auto") == expected


@pytest.mark.parametrize("name", ["cpu", "cuda", "cuda:0", "cuda:3"])
def test_explicit_devices_are_kept_whatever_torch_sees(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: name == "cpu")
    assert resolve_device(name) == name


@pytest.mark.parametrize("name", ["gpu0", "cuda:", "cuda:x", "CPU", "", "mps"])
def test_other_names_are_a_user_error(name):
    with pytest.raises(UserError, match=r"--device must be auto, cpu, cuda or cuda:N"):
        resolve_device(name)
