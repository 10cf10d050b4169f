"""``dit_lora/training/launch_precision.py``: the launch options' ``--mixed_precision`` as the run reads it (the
launcher sets it: tests/commands/test_launch.py); here below the commands, which re-export it."""

from __future__ import annotations

import pytest

from dit_lora.commands import launch
from dit_lora.core.errors import UserError
from dit_lora.training.launch_precision import LAUNCH_PRECISION_VAR, check_launch_precision


def test_the_launcher_and_the_run_share_one_name():
    assert launch.LAUNCH_PRECISION_VAR is LAUNCH_PRECISION_VAR
    assert launch.check_launch_precision is check_launch_precision


def test_nothing_to_say_without_a_launch_value_or_with_the_same_one(monkeypatch):
    lines: list[str] = []
    monkeypatch.delenv(LAUNCH_PRECISION_VAR, raising=False)
    check_launch_precision("bf16", lines.append)
    monkeypatch.setenv(LAUNCH_PRECISION_VAR, "bf16")
    check_launch_precision("bf16", lines.append)
    assert lines == []


def test_another_value_is_said_and_fp16_refused(monkeypatch):
    lines: list[str] = []
    monkeypatch.setenv(LAUNCH_PRECISION_VAR, "no")
    check_launch_precision("bf16", lines.append)
    assert len(lines) == 1 and "not used" in lines[0]
    monkeypatch.setenv(LAUNCH_PRECISION_VAR, "fp16")
    with pytest.raises(UserError, match="--allow_fp16"):
        check_launch_precision("bf16", lines.append)
