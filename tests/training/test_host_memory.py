"""training/host_memory.py: the glibc settings that keep a step's freed memory, and where they do not apply."""

from __future__ import annotations

import ctypes
import sys

import pytest

from dit_lora.training import host_memory


class _FakeLibc:
    def __init__(self, answer: int):
        self.calls, self.answer = [], answer

        def mallopt(param, value):
            self.calls.append((param, value))
            return self.answer

        self.mallopt = mallopt


def test_the_three_settings_are_applied(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    libc = _FakeLibc(1)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: libc)
    note = host_memory.reuse_freed_memory()
    assert note and "--cpu_reuse_memory false" in note
    assert dict(libc.calls) == {host_memory.M_MMAP_THRESHOLD: 32 * 2**20, host_memory.M_TRIM_THRESHOLD: 2**31 - 1,
                                host_memory.M_TOP_PAD: 64 * 2**20}


def test_a_refused_setting_or_a_libc_without_mallopt_says_nothing(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeLibc(0))
    assert host_memory.reuse_freed_memory() is None
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())  # musl-like: no mallopt
    assert host_memory.reuse_freed_memory() is None
    monkeypatch.setattr(sys, "platform", "darwin")
    assert host_memory.reuse_freed_memory() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_this_machine_accepts_them():
    assert host_memory.reuse_freed_memory() is not None
