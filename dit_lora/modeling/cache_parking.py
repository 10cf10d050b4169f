"""The trained model's blocks wait in host memory while the latent cache is built, and come to the device after.

**Why.** A run that caches (``--cache_latents``, the default) loads every component, encodes the whole data set with
the text encoder and the VAE, releases them, then trains. Before this, the trained model went to the device at
load, so the caching phase held the transformer *and* the encoders: for FLUX.2 [dev] (a 32B transformer beside a
24B Mistral text encoder) that phase alone needed 106 GiB, more than its training phase with the fit levers, and no
lever could bring it under a 24 GB card. musubi-tuner and diffusion-pipe cache in a separate step for the same
reason. Here the transformer's repeated blocks (``FamilyInfo.block_lists``: nearly all of its weights) stay where
the loader read them, in host memory, until the cache is built and the encoders are gone (:func:`bring_waiting`,
called by the training setup); what is outside the blocks (embedders, the output layer) goes to the device at load
as before, so anything the data path reads from the model is where it was.

**How.** The blocks are parked with :func:`~dit_lora.modeling.host_parking.park_block` (unpinned: the loader's own
tensors, aliased, not copied), so the loader's ``.to(device)`` leaves them in host memory; the blocks
``--blocks_to_swap`` swaps are parked as before (pinned on CUDA) and stay parked. After the cache:
:func:`~dit_lora.modeling.host_parking.unpark` and ``.to(device)``, one block at a time (one synchronous copy each:
the bytes the load would have copied, later). On a CPU nothing moves at all: a parked block's "host copy" is the
tensor itself.

**When not.** A run that does not cache (``--cache_latents false``, the video LLMs) has no caching phase; a
library-quantized base (nf4, int8, torchao's fp8; also a folder whose own config quantizes it, found by its tensors)
holds tensor subclasses that parking cannot move; under FSDP2
every block is parked until it is sharded anyway (:func:`~dit_lora.modeling.block_swap.park_blocks`); a family's
loader may opt out (Wan 2.2 A14B: its experts are placed by :class:`~dit_lora.families.wan.experts.WanExperts`).
The memory plan counts the same (``Plan.blocks_wait``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from dit_lora.core.engine import decide_engine
from dit_lora.modeling import block_swap, host_parking

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, ModelOptions, TrainConfig


def run_caches(data: DataOptions) -> bool:
    """Whether this run has a caching phase for the blocks to wait through (the base aside: :func:`waits_for_cache`)."""
    return bool(data.cache_latents)


def waits_for_cache(data: DataOptions, model: ModelOptions) -> bool:
    """Whether this run's blocks wait in host memory while the cache is built (module docstring, "When not")."""
    return run_caches(data) and model.quantize_base not in block_swap.LIBRARY_QUANTIZED


def park_for_load(
    model: nn.Module, paths: Sequence[str], cfg: TrainConfig, device: torch.device | str, *, wait: bool = True
) -> int:
    """What a family's loader calls before it moves ``model`` to ``device``: ``--blocks_to_swap``'s blocks parked
    (:func:`~dit_lora.modeling.block_swap.park_blocks`) and, when the run caches (:func:`waits_for_cache`; ``wait``:
    the family's own say), the other blocks of ``paths`` too, until :func:`bring_waiting`. Returns the blocks
    parked."""
    parked = block_swap.park_blocks(model, paths, cfg.performance.blocks_to_swap, device)
    if not (wait and waits_for_cache(cfg.data, cfg.model)) or decide_engine().name == "fsdp2":
        return parked
    swapped = _swapped_ids(model, paths, int(cfg.performance.blocks_to_swap))
    waiting = [block for blocks in block_swap.block_lists(model, paths) for block in blocks if id(block) not in swapped]
    if not all(_plain(block) for block in waiting):
        return parked  # a folder quantized by its own config (bitsandbytes' Params4bit...): they stay where it put them
    for block in waiting:
        block.requires_grad_(False)  # as every loader freezes its model: nothing is trained yet
        host_parking.park_block(block, torch.device(device), pin=False)
        parked += 1
    return parked


def _plain(block: nn.Module) -> bool:
    """Whether every frozen tensor of ``block`` is a plain tensor or Parameter (what parking can move)."""
    return all(type(tensor) in (torch.Tensor, nn.Parameter) for _, _, tensor in host_parking.frozen_slots(block))


def bring_waiting(model: nn.Module, paths: Sequence[str], count: int, device: torch.device | str) -> tuple[int, int]:
    """Bring to ``device`` every block of ``paths`` that waits in host memory but for those ``--blocks_to_swap count``
    swaps (they stay parked for :func:`~dit_lora.modeling.block_swap.install`). Returns (blocks, their bytes)."""
    swapped = _swapped_ids(model, paths, count)
    moved, size = 0, 0
    for blocks in block_swap.block_lists(model, paths):
        for block in blocks:
            if id(block) in swapped or not host_parking.unpark(block):
                continue
            block.to(device)
            moved += 1
            size += sum(t.numel() * t.element_size() for _, _, t in host_parking.frozen_slots(block))
    return moved, size


def describe(moved: int, size: int, device: torch.device | str) -> str:
    """The log line of :func:`bring_waiting`'s result."""
    kind = torch.device(device).type
    if kind == "cpu":  # nothing moved: a parked block's host copy was its own tensor
        return (
            f"cache built: its {moved} waiting block(s) ({size / 2**30:.2f} GiB) were in place (the CPU is the device)"
        )
    return (
        f"cache built: {moved} block(s) ({size / 2**30:.2f} GiB) that waited in host memory while it was built "
        f"came to {kind}"
    )


def _swapped_ids(model: nn.Module, paths: Sequence[str], count: int) -> set[int]:
    if count <= 0:
        return set()
    return {id(block) for blocks in block_swap.swapped_blocks(model, paths, count) for block in blocks}


__all__ = ["bring_waiting", "describe", "park_for_load", "run_caches", "waits_for_cache"]
