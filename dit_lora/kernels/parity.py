"""Does a patched block still compute what the installed library's block computes? Forward and backward.

A family's patch points (``families/<name>/kernels.py``) re-implement library forwards with the
fused ops. :func:`check_block` builds two copies of one block, patches one with the points
(its forward and, inside it, any attention processors and norms the points cover), and runs both
in fp32 on the same inputs and parameters, forward and backward (the gradients of the named
inputs and of every parameter). The verdict is the kernels' own tolerance
(:func:`~dit_lora.kernels.tolerance.check_call`): each result is compared with the library block
run in float64, and the patched block may be off by no more than a correct implementation at fp32.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from dit_lora.kernels.patch import kernel_counts, patch_model
from dit_lora.kernels.patch_points import PatchPoint
from dit_lora.kernels.tolerance import check_call


def _flat(out: Any) -> torch.Tensor:
    """A block's output (a tensor, or a tuple of them) as one 1-D tensor."""
    if isinstance(out, torch.Tensor):
        return out.flatten()
    return torch.cat([t.flatten() for t in out if isinstance(t, torch.Tensor)])


def _caller(module: nn.Module, keys: list[str], names: list[str], fixed: dict[str, Any]):
    """fn(*inputs, *params) -> the module's flattened output, with ``names`` bound to the given parameters."""

    def run(*xs):
        kwargs = {**fixed, **dict(zip(keys, xs[: len(keys)]))}
        return _flat(functional_call(module, dict(zip(names, xs[len(keys) :])), (), kwargs))

    return run


def patch_block(block: nn.Module, points: Sequence[PatchPoint], **switches) -> tuple[nn.Module, dict[str, int]]:
    """A copy of ``block`` patched with ``points`` (Triton kernels, math attention unless ``switches`` say)."""
    fused = copy.deepcopy(block)
    options = {"kernels": "on", "attention_backend": "math", **switches}
    patch_model(fused, points, **options)
    return fused, kernel_counts(fused)


def check_block(
    block: nn.Module,
    points: Sequence[PatchPoint],
    inputs: dict[str, Any],
    grads: Sequence[str],
    seed: int = 0,
    stats: list | None = None,
    **switches,
) -> str:
    """'' when ``block`` patched with ``points`` matches the library's own ``block``; else why not.

    ``inputs`` are the block's keyword arguments; its floating tensors are compared in gradient
    when named in ``grads`` (the others, and every non-tensor, are passed as they are). Every
    parameter's gradient is compared too. Raises ``ValueError`` when no point patches ``block``
    itself (its class, or its configuration, is not one the points cover). ``stats`` collects
    :func:`~dit_lora.kernels.tolerance.error_stats` of each comparison.
    """
    block = block.eval()
    fused, _ = patch_block(block, points, **switches)
    if "forward" not in fused.__dict__:
        raise ValueError(f"no patch point patches {type(block).__qualname__} in this configuration")
    keys = [k for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    fixed = {k: v for k, v in inputs.items() if k not in keys}
    names = [n for n, _ in block.named_parameters()]
    params = tuple(p.detach() for _, p in block.named_parameters())
    args = tuple(inputs[k] for k in keys) + params
    needs_grad = tuple(k in grads for k in keys) + (True,) * len(params)
    autocast = (args[0].device.type, False, torch.float32)
    return check_call(
        _caller(fused, keys, names, fixed),
        _caller(block, keys, names, fixed),
        args,
        needs_grad,
        autocast,
        seed=seed,
        stats=stats,
    )
