"""training/host_memory.py: the glibc settings that keep a step's freed memory, and where they do not apply."""

from __future__ import annotations

import ctypes
import subprocess
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


def test_release_hands_the_free_heap_back_once(monkeypatch):
    calls = []

    class Libc:
        @staticmethod
        def malloc_trim(pad):
            calls.append(pad)
            return 1

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: Libc())
    assert host_memory.release_freed_memory() is True and calls == [0]
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())
    assert host_memory.release_freed_memory() is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_this_machines_c_library_accepts_them():
    """In a child process: the settings stay with the process that applies them."""
    code = ("from dit_lora.training.host_memory import release_freed_memory, reuse_freed_memory; "
            "assert release_freed_memory() and reuse_freed_memory()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
