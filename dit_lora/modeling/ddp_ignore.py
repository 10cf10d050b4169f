"""Tensors DDP must leave alone: named in the module's ``_ddp_params_and_buffers_to_ignore``.

torch's ``DistributedDataParallel`` reads that list when it wraps a module: the named parameters and buffers are
neither broadcast from rank 0 at the start nor (buffers) at every forward, nor checked to sit on DDP's device.
Two memory levers need it: ``--quantize_base fp8_scaled``'s integer weight buffers (gloo has no float8, and
broadcasting every frozen weight each step is wasted traffic) and ``--blocks_to_swap``'s parked tensors (in host
memory between uses, not on the device). One helper so both add to the list instead of overwriting each other's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from torch import nn

ATTRIBUTE = "_ddp_params_and_buffers_to_ignore"


def ignore_in_ddp(model: nn.Module, names: Iterable[str]) -> None:
    """Add ``names`` (as ``model.named_parameters()``/``named_buffers()`` spell them) to ``model``'s DDP ignore list,
    keeping the names already there. Call it on the module handed to DDP (``accelerator.prepare``), after LoRA is
    attached: PEFT's wrappers change the names."""
    added = set(names)
    if not added:
        return
    kept = set(getattr(model, ATTRIBUTE, ()))
    cast(Any, model)._ddp_params_and_buffers_to_ignore = sorted(kept | added)  # a plain list attribute


__all__ = ["ATTRIBUTE", "ignore_in_ddp"]
