"""The engine decision: DDP unless the launch asks for FSDP2; DeepSpeed and FSDP version 1 refused in one paragraph."""

from __future__ import annotations

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
