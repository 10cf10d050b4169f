"""The bytes each optimizer keeps per trained tensor, as the memory plan counts them (torch-free arithmetic on shapes).

The optimizer table (:mod:`dit_lora.config.optimizers`) gives each optimizer one of these; the plan
(:mod:`dit_lora.plan.estimate`) calls it on the trainable parameters' shapes. Each count is tested against the tensors
the optimizer itself keeps after a step (tests/training/test_adafactor.py, test_came.py, test_lowbit_adam.py), or
against the library's allocation rule (bitsandbytes', tests/config/test_optimizer_state.py).
"""

from __future__ import annotations

import math

#: bitsandbytes' 8-bit optimizers keep a tensor's state in 32 bits below this many elements (``min_8bit_size``) ...
BNB_MIN_8BIT_SIZE = 4096
#: ... and above it one byte per element and moment plus an fp32 absmax per block of this many (``blocksize``)
BNB_BLOCKSIZE = 256
#: torchao's low-bit moments: values per fp32 block scale (the optimizers' ``block_size``) and lookup-table entries
#: (``qmap``, fp32, one table per moment), by bits
TORCHAO_BLOCK = {8: 256, 4: 128}
TORCHAO_QMAP = {8: 256, 4: 16}
#: torchao quantizes a moment of at least this many values (and a whole number of blocks), as bitsandbytes does
TORCHAO_MIN_SIZE = 4096


def prodigy_state_bytes(numels: list[int]) -> int:
    """Prodigy's state for trainable tensors of ``numels`` elements (training/prodigy.py): ``exp_avg``,
    ``exp_avg_sq``, ``s`` and ``p0``, fp32, four values per weight."""
    return sum(16 * n for n in numels)


def adafactor_state_bytes(shapes: list[tuple[int, ...]], *, first_moment: float | None) -> int:
    """Adafactor's state for trainable tensors of ``shapes`` (training/adafactor.py), fp32: a matrix's second moments
    factored into a row and a column (a 1-D tensor keeps one per value), its step and RMS scalars, and with a
    ``first_moment`` decay (--adafactor_beta1) one value per weight."""
    total = 0
    for shape in shapes:
        numel = math.prod(shape)
        second = math.prod(shape[:-1]) + math.prod(shape[:-2] + shape[-1:]) if len(shape) >= 2 else numel
        total += 4 * second + 8 + 4 + (4 * numel if first_moment is not None else 0)
    return total


def came_state_bytes(shapes: list[tuple[int, ...]]) -> int:
    """CAME's state for trainable tensors of ``shapes`` (training/came.py), fp32: a first moment of each tensor's
    size; a matrix's second moments and its instabilities each factored into a row and a column (a 1-D tensor keeps
    a full second moment and no instability); a float64 step count."""
    total = 0
    for shape in shapes:
        numel = math.prod(shape)
        factored = math.prod(shape[:-1]) + math.prod(shape[:-2] + shape[-1:]) if len(shape) >= 2 else 0
        total += 4 * numel + (4 * 2 * factored if factored else 4 * numel) + 8
    return total


def adam_moment_bytes(numels: list[int], *, eight_bit: bool) -> int:
    """AdamW's two moments for trainable tensors of ``numels`` elements: fp32 (torch's AdamW), or with
    ``eight_bit`` as ``bitsandbytes.optim.AdamW8bit`` allocates them (``Optimizer2State.init_state``, bitsandbytes
    0.49-0.50): a uint8 state per moment and an fp32 absmax per 256 elements, fp32 states for a tensor under 4,096
    elements. A LoRA's A and B matrices are nearly all above it: about 2 bytes a parameter instead of 8."""
    if not eight_bit:
        return sum(8 * n for n in numels)
    total = 0
    for n in numels:
        if n < BNB_MIN_8BIT_SIZE:
            total += 8 * n
        else:
            total += 2 * (n + 4 * -(-n // BNB_BLOCKSIZE))
    return total


def lowbit_adam_state_bytes(numels: list[int], *, bits: int, element_size: int = 4) -> int:
    """torchao's ``AdamW8bit`` (``bits`` 8) or ``AdamW4bit`` (4) state for trainable tensors of ``numels`` elements, as
    training/lowbit_adam.py keeps it (torchao 0.18's ``_new_buffer``): per tensor an fp32 step count and two moments,
    each ``bits`` per element (uint8 codes, two 4-bit codes a byte), an fp32 scale per block and its fp32 lookup table;
    a tensor under 4,096 elements, or not a whole number of blocks, keeps them unquantized in the parameter's dtype
    (``element_size`` bytes: fp32 masters). A LoRA's matrices: about 2 bytes a parameter (8-bit) or 1.06 (4-bit)
    instead of AdamW's 8."""
    block, table = TORCHAO_BLOCK[bits], TORCHAO_QMAP[bits]
    total = 0
    for n in numels:
        if n >= TORCHAO_MIN_SIZE and n % block == 0:
            total += 2 * (n * bits // 8 + 4 * (n // block) + 4 * table)
        else:
            total += 2 * element_size * n
        total += 4  # the step count
    return total


__all__ = [
    "BNB_BLOCKSIZE",
    "BNB_MIN_8BIT_SIZE",
    "TORCHAO_BLOCK",
    "TORCHAO_MIN_SIZE",
    "TORCHAO_QMAP",
    "adafactor_state_bytes",
    "adam_moment_bytes",
    "came_state_bytes",
    "lowbit_adam_state_bytes",
    "prodigy_state_bytes",
]
