"""``--cpu_reuse_memory``: on a CPU, keep the memory a step frees for the next step instead of returning it.

PyTorch's CPU tensors come from glibc's ``malloc``. By default glibc serves blocks above a (dynamic) threshold
with fresh ``mmap`` pages and gives freed heap back to the system, so a training step that allocates the same
activations every time page-faults (and has the kernel zero) all of them again: measured on the small random Sana
at 256 px, batch 4, bf16, 0.708 s per step with glibc's defaults and 0.594 s with the blocks kept
(CHANGELOG.md, Benchmark history). Three of glibc's own settings (``mallopt``, the knobs of its ``MALLOC_*_``
environment variables) keep them: blocks up to the largest mmap threshold glibc allows (32 MiB) come from the heap,
and the heap is not trimmed. Larger blocks are still mapped afresh each step. The settings take effect at the end
of setup: loading and caching (each done once) run with glibc's defaults, what they freed is handed back
(:func:`release_freed_memory`), and training keeps its own working set, not theirs. A CUDA run's tensors do not
use ``malloc``: the run leaves the allocator alone there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
#: glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2: 32 MiB on 64-bit systems
MMAP_THRESHOLD = 32 * 2**20
#: never give freed heap back (the next step reuses it); grow the heap in large steps
TRIM_THRESHOLD, TOP_PAD = 2**31 - 1, 64 * 2**20


def _libc(name: str):
    """The C library's function ``name`` (glibc on Linux), or None: not Linux, or a C library without it (musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def reuse_freed_memory() -> str | None:
    """Apply the three settings to this process; a line for the log, or None where they do not apply."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    for param, value in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD)):
        if not mallopt(param, value):  # glibc refused one: say nothing rather than claim the rest
            return None
    return (
        f"host memory: tensors up to {MMAP_THRESHOLD >> 20} MiB come from the heap and what a step frees stays "
        "for the next one (fewer page faults per step; --cpu_reuse_memory false leaves glibc's settings alone)"
    )


def release_freed_memory() -> bool:
    """Hand the heap's free pages back to the system once (glibc's ``malloc_trim``): after setup, so training
    does not keep what loading and caching freed. False where there is no ``malloc_trim``."""
    trim = _libc("malloc_trim")
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


__all__ = ["release_freed_memory", "reuse_freed_memory"]
