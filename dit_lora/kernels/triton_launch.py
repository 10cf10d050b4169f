"""Launching the Triton kernels: whether they can run here, the one-time note when not, tile and grid sizes.

(Not to be confused with :class:`~dit_lora.kernels.monitor.KernelRuntime`, which picks an implementation per op
during training and checks it.)

Triton compiles for CUDA devices. On a CPU the same kernels run under Triton's interpreter
(``TRITON_INTERPRET=1``, read when ``triton.jit`` decorates a kernel, so it must be set before
the kernel modules are imported); that is how CI checks them. Anywhere else the patched
modules keep their PyTorch reference paths, and :func:`note_once` says so a single time.
"""

from __future__ import annotations

import functools
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


# ---- launch helpers shared by the row-wise kernels (modulate, gated residual, RMSNorm) ----
# A row wider than this would not fit one program's registers; no diffusion transformer is near it.
MAX_BLOCK_D = 65536
# Programs per sample in the backward kernels under the interpreter with the GPU's tiling: two is
# enough to exercise both the strided loop over row blocks and the cross-program partial sums.
_INTERPRETER_PROGRAMS = 2

#: Whether kernels under Triton's CPU interpreter take wide tiles (see :func:`wide_tiles`). The kernel
#: unit tests set it False, to run the GPU's tiling on the interpreter: partial row blocks, the
#: backward's strided loop over several row blocks per program and the cross-program partial sums.
WIDE_INTERPRETER_TILES = True
# Elements of one wide tile, and its most rows: timed in the interpreter on CogVideoX's q/k norms and
# Sana's blocks, a larger tile than this saves no more (numpy's per-element cost takes over).
_WIDE_BUDGET = 1 << 18
_WIDE_ROWS = 1 << 14


def wide_tiles() -> bool:
    """True when kernels run in Triton's interpreter and take few wide tiles rather than the GPU's.

    The interpreter pays per Python-level operation of each program, not per element: a tiny model's
    LayerNorm over thousands of short rows costs seconds in 16-row tiles and little in one wide tile.
    Compiled kernels (``interpreting()`` False) always take the GPU tiling.
    """
    return WIDE_INTERPRETER_TILES and interpreting()


def require_triton(device: torch.device | str, op: str) -> None:
    """Raise a RuntimeError saying why ``op`` cannot run its Triton kernel on ``device``, if it cannot."""
    ok, reason = triton_usable(device)
    if not ok:
        raise RuntimeError(f"{op}: {reason or 'Triton is not installed'}; use the *_reference function instead")


def tile_config(d: int, rows: int = 1) -> tuple[int, int, int]:
    """``(BLOCK_D, BLOCK_M, num_warps)`` for ``rows`` rows (of one sample) of hidden size ``d``.

    ``rows`` only matters under the interpreter's wide tiles (:func:`wide_tiles`), which take up to
    all of them in one program; the GPU tiling depends on ``d`` alone.
    """
    block_d = next_power_of_2(max(1, d))
    if block_d > MAX_BLOCK_D:
        raise ValueError(f"hidden size {d} is wider than the fused row kernels support ({MAX_BLOCK_D})")
    if wide_tiles():
        # No wider than the rows there are: padding rows cost the interpreter per element.
        block_m = rows_per_program(block_d, _WIDE_BUDGET, min(_WIDE_ROWS, next_power_of_2(max(1, rows))))
    else:
        block_m = rows_per_program(block_d)
    # Roughly 8-16 fp32 elements per thread: wide enough to hide memory latency, few enough
    # live tiles (the backward keeps ~6) to stay out of local-memory spills.
    num_warps = min(16, max(4, block_m * block_d // 512))
    return block_d, block_m, num_warps


def at_least_fp32(t: torch.Tensor) -> torch.Tensor:
    """``t`` in fp32, or unchanged when it is float64 (references then run exactly, for the checks)."""
    return t if t.dtype == torch.float64 else t.float()


def kernel_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel should write for an output that must end up in ``dtype``.

    Triton's interpreter casts fp32 to bf16 by truncating the mantissa, where GPUs round to nearest
    even; a bf16 output is then up to a whole ulp off instead of half. Under the interpreter, bf16
    outputs are therefore written in fp32 and rounded by torch, so CPU checks see GPU rounding.
    """
    if dtype == torch.bfloat16 and interpreting():
        return torch.float32
    return dtype


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def reduction_programs(n_blocks: int, batch: int, device: torch.device) -> int:
    """Programs per sample for a backward kernel that sums over ``n_blocks`` row blocks per sample.

    Each program loops over every G-th block and writes one partial row, so G bounds the size of
    the partial-sum buffer (``batch x G x D`` fp32) while keeping every SM busy.
    """
    if n_blocks <= 0:
        return 1
    if device.type == "cuda" and not interpreting():
        index = device.index if device.index is not None else torch.cuda.current_device()
        cap = max(1, 4 * _sm_count(index) // max(1, batch))
    else:
        # Wide tiles: one program per sample loops over the (few) row blocks, the cheapest launch.
        cap = 1 if wide_tiles() else _INTERPRETER_PROGRAMS
    return max(1, min(n_blocks, cap))
