"""When the Triton kernels can run, and the one-time note when they cannot.

Triton compiles for CUDA devices. On a CPU the same kernels run under Triton's interpreter
(``TRITON_INTERPRET=1``, read when ``triton.jit`` decorates a kernel, so it must be set before
the kernel modules are imported); that is how CI checks them. Anywhere else the patched
modules keep their PyTorch reference paths, and :func:`note_once` says so a single time.
"""

from __future__ import annotations

import importlib.util
import logging
import os

import torch

logger = logging.getLogger("dit_lora.kernels")

_NOTED: set[str] = set()


def triton_installed() -> bool:
    """True when the ``triton`` package can be imported."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def triton_usable(device: torch.device | str) -> tuple[bool, str]:
    """Whether Triton kernels can run on tensors of ``device``; when not, the reason in one sentence."""
    device = torch.device(device)
    if not triton_installed():
        return False, "Triton is not installed (`pip install 'dit-lora[triton]'`)"
    if device.type == "cuda" or interpreting():
        return True, ""
    return False, f"Triton kernels need a CUDA device, or TRITON_INTERPRET=1 to interpret them on a {device.type}"


def note_once(key: str, message: str) -> None:
    """Log ``message`` at warning level the first time ``key`` is seen in this process."""
    if key in _NOTED:
        return
    _NOTED.add(key)
    logger.warning(message)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (Triton block sizes must be powers of two)."""
    return 1 << max(0, int(n) - 1).bit_length()


def rows_per_program(block_d: int, budget: int = 4096, most: int = 16) -> int:
    """How many rows one program takes so that a ``rows x block_d`` tile stays within ``budget`` elements."""
    return max(1, min(most, budget // block_d))
