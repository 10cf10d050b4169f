"""The engine decision: DDP unless the launch asks for FSDP2; DeepSpeed and FSDP version 1 refused in one paragraph."""

from __future__ import annotations

import os

import pytest

from dit_lora.core.engine import decide_engine
from dit_lora.core.errors import UserError


def test_a_plain_launch_is_ddp():
    assert decide_engine({}).name == "ddp"
    assert decide_engine({"ACCELERATE_USE_FSDP": "false", "FSDP_VERSION": "2"}).name == "ddp"


def test_fsdp2_config_is_fsdp2_with_reasons():
    choice = decide_engine({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"})
    assert choice.name == "fsdp2" and choice.reasons and "FSDP_VERSION=2" in choice.reasons[0]


@pytest.mark.parametrize("env", [{"ACCELERATE_USE_FSDP": "true"}, {"ACCELERATE_USE_FSDP": "True", "FSDP_VERSION": "1"}])
def test_fsdp_version_1_is_refused_naming_fsdp2_yaml(env):
    with pytest.raises(UserError, match=r"FSDP version 1 .*accelerate_configs/fsdp2\.yaml.*fsdp_version: 2"):
        decide_engine(env)


def test_deepspeed_is_refused_naming_both_configs():
    with pytest.raises(UserError, match=r"DeepSpeed.*multi_gpu\.yaml.*fsdp2\.yaml"):
        decide_engine({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"})


def test_the_process_environment_is_read_by_default(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert decide_engine().name == "fsdp2"


def test_plain_cpu_device_places_cpu_ranks_on_cpu_not_cpu_index(monkeypatch):
    """Without CUDA the Accelerator is built with ACCELERATE_TORCH_DEVICE=cpu (accelerate would pick `cpu:<rank>`, and
    torch copies a tensor moved from `cpu` to `cpu:0`: every weight once more per rank); restored afterwards, left
    alone with CUDA or when the user set it."""
    import torch

    from dit_lora.core.engine import TORCH_DEVICE_VAR, plain_cpu_device

    moved = torch.zeros(4)
    assert moved.to(torch.device("cpu", 0)).data_ptr() != moved.data_ptr()  # why: a copy
    assert moved.to(torch.device("cpu")).data_ptr() == moved.data_ptr()
    monkeypatch.delenv(TORCH_DEVICE_VAR, raising=False)
    with plain_cpu_device(cuda_available=False):
        assert os.environ[TORCH_DEVICE_VAR] == "cpu"
    assert TORCH_DEVICE_VAR not in os.environ
    with plain_cpu_device(cuda_available=True):
        assert TORCH_DEVICE_VAR not in os.environ
    monkeypatch.setenv(TORCH_DEVICE_VAR, "cpu:1")
    with plain_cpu_device(cuda_available=False):
        assert os.environ[TORCH_DEVICE_VAR] == "cpu:1"
    assert os.environ[TORCH_DEVICE_VAR] == "cpu:1"
