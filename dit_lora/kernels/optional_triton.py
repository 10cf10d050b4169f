"""``triton`` and ``triton.language`` for the kernel modules, or ``None`` for both when Triton is not installed.

The kernels are optional: a kernel module defines its ``@triton.jit`` functions under ``if triton is not None``,
and its PyTorch reference imports either way (:func:`~dit_lora.kernels.triton_launch.triton_usable` says why a
kernel cannot run). Kept apart from ``triton_launch`` so that asking whether Triton can run never imports it.
"""

from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None
    tl = None

__all__ = ["tl", "triton"]
