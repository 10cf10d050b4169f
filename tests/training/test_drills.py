"""training/hooks.py: the run's drills and debug switches, parsed once from flags and environment variables."""

from __future__ import annotations

import signal

import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.training.drills import CRASH_VAR, SIGNAL_VAR, Hooks
from dit_lora.training.sync_audit import ENV_VAR as SYNC_VAR


@pytest.fixture
def clean_env(monkeypatch):
    for var in (CRASH_VAR, SIGNAL_VAR, SYNC_VAR):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_everything_off_by_default(clean_env):
    hooks = Hooks.from_config(None, 0, torch.device("cpu"))
    assert hooks.injector is None and hooks.crash_at is None and hooks.signal_at is None
    assert not hooks.sync_audit.enabled
    hooks.crash_point("micro_batch", 1)  # does nothing


def test_switches_are_read(clean_env):
    clean_env.setenv(CRASH_VAR, "checkpoint_after_rename:4")
    clean_env.setenv(SIGNAL_VAR, "validation:2:INT")
    clean_env.setenv(SYNC_VAR, "1")
    hooks = Hooks.from_config("nan_loss@3", 0, torch.device("cpu"))
    assert hooks.injector.faults[0].kind == "nan_loss"
    assert hooks.crash_at == ("checkpoint_after_rename", 4)
    assert hooks.signal_at == ("validation", 2, int(signal.SIGINT))
    assert hooks.sync_audit.enabled


def test_a_signal_point_for_another_rank_is_off_here(clean_env):
    clean_env.setenv(SIGNAL_VAR, "micro_batch:6@1")
    assert Hooks.from_config(None, 0, torch.device("cpu")).signal_at is None
    assert Hooks.from_config(None, 1, torch.device("cpu")).signal_at == ("micro_batch", 6, int(signal.SIGTERM))


@pytest.mark.parametrize("var, value", [
    (CRASH_VAR, "micro_batch"), (CRASH_VAR, "nowhere:3"), (CRASH_VAR, "validation:3"),
    (SIGNAL_VAR, "micro_batch:x"), (SIGNAL_VAR, "micro_batch:3:KILL"), (SIGNAL_VAR, "micro_batch:3@r1"),
])
def test_a_malformed_switch_stops_the_run_naming_it(clean_env, var, value):
    clean_env.setenv(var, value)
    with pytest.raises(UserError, match=var):
        Hooks.from_config(None, 0, torch.device("cpu"))


def test_crash_point_sends_the_configured_signal_at_its_instant(clean_env):
    received = []
    previous = signal.signal(signal.SIGTERM, lambda *_: received.append("TERM"))
    try:
        hooks = Hooks(injector=None, sync_audit=None, signal_at=("micro_batch", 2, int(signal.SIGTERM)))
        hooks.crash_point("micro_batch", 1)
        assert received == []
        hooks.crash_point("micro_batch", 2)
        assert received == ["TERM"]
    finally:
        signal.signal(signal.SIGTERM, previous)
