"""``--blocks_to_swap N``: the frozen weights of the last N transformer blocks wait in host memory and come to the
device for each block's forward and backward; and the host parking Wan's A14B experts share.

**What moves, and when.** A family names its lists of repeated blocks once (``FamilyInfo.block_lists``: attribute
paths from the trained model). Of each list, the last N blocks are *swapped* (of a list shorter than the longest,
the same share of its blocks: :func:`per_list_counts`): their frozen tensors (parameters that
do not require grad, and buffers) are parked at load, before the model goes to the device (:func:`park_blocks`,
called by the family's loader: pinned host copies on CUDA), so the device never holds them all. LoRA weights,
anything trained, and their optimizer state stay on the device. :func:`install` (the training setup, after LoRA is
attached, before accelerate's preparation) hooks each swapped block: its forward pre-hook copies the block in (the
next block's copy starts meanwhile, on a side stream on CUDA: an event orders the compute stream after it and
``record_stream`` keeps the allocator from reusing a copy the compute stream still reads), its forward hook parks
it again (pointer changes only: frozen weights never change, nothing is copied back), but for the last block of its
list when a backward follows (the backward starts with it). The block before the first swapped one starts that
block's copy. Outside a forward or backward every swapped block is parked. At most two swapped blocks' copies are
alive at once (the one computing, the one arriving); on CUDA the memory of the one just left is reused only once
the compute stream has passed it, so the memory plan counts three there. On a CPU the same code runs: the copies are
real copies into fresh memory (the "device" is the CPU), so the CPU tests exercise every path, and results are
bitwise those of a run without the swap.

**Backward: what autograd keeps.** Autograd saves a frozen weight for the backward in one of two ways, checked on
torch 2.13: ``F.linear`` saves ``weight.t()``, a view holding the storage the weight had in the forward, so
pointing the Parameter elsewhere afterwards changes nothing (and frees nothing: the device copy lives until the
backward); LayerNorm, convolutions and custom functions (fp8_scaled's) save the tensor itself, and the backward
reads whatever ``.data`` it holds then. So a swap must both keep the forward's saved references from pinning the
device copies and have the weights on the device when each backward node runs. Without gradient checkpointing
(and in a reentrant checkpoint's recomputation), the swap's own ``saved_tensors_hooks`` around each swapped block's
forward record any saved tensor that lives in one of the block's device copies as a reference (the tensor, its
dtype, offset, size and strides) and rebuild it at unpack from the block's device copy, bringing the block in
first: the first unpack of a block in a backward brings it (prefetched by the block after it) and starts the copy
of the block before. Under torch's non-reentrant checkpoint (the families' checkpointing) its own saved-tensor hooks
are active around the block and the swap adds none: the forward saves no weight, the recomputation runs the block's
forward hooks again (brought in; the previous block's copy starts), and what the recomputation saves are aliases of
the device copies, alive exactly until the block's backward nodes have run. A callback queued on the backward
(``queue_callback``, as DDP's reducer does) parks every block at its end. ``--activation_offloading``'s hooks are
not a checkpoint's: found under the swap's (:func:`~dit_lora.modeling.activation_offload.chained`), they get every
saved tensor that is not a swapped weight, and its unpack gets them back (only the innermost hooks run).

**Why not diffusers' group offloading** (``apply_group_offloading(offload_type="block_level", use_stream=True)``,
``hooks/group_offloading.py`` in diffusers 0.42): it is built for inference. Its ``post_forward`` offloads a group
by ``param.data = cpu_copy`` and it registers no backward hook, so (read above) without checkpointing the Linear
weights stay on the device anyway through autograd's saved views while LayerNorm and convolution backward nodes
meet CPU weights (a device mismatch on CUDA); its hooks do fire on a non-reentrant recomputation, but its stream
prefetch follows the forward order, so in the backward each group is onloaded synchronously; and it treats every
parameter of a group alike, trained or not: with streams ``offload_`` points each one back at a CPU copy made when
offloading was applied (the LoRA weights would lose their updates at every forward), without streams it moves them
to the CPU after each forward, away from their gradients and the optimizer. musubi-tuner's ``ModelOffloader``
(``modules/custom_offloading_utils.py``: ``swap_weight_devices`` copies one block's weights into the device buffers
of another, ``register_full_backward_hook`` swaps them back during the backward) needs calls in each model's own
forward loop and keeps a fixed pool of device buffers; its backward is right because the swap pairs are symmetric,
so every buffer holds its block again when that block's backward reads the forward's saved views. Its device holds
exactly N blocks less; here each copy is fresh memory, which costs the blocks in flight (above) but cannot be
overwritten while a recomputation's aliases still read it. The hooks here need nothing from the model: any block
list of any family works, and correctness does not depend on the order the blocks run in.

**Exact resume.** The swap holds no state a checkpoint must carry: which blocks are parked is decided by N and the
hooks, every step starts with all of them parked, and the values computed are those of a run without the swap.

**Under FSDP2** :func:`park_blocks` parks every block (no swap is installed: ``--blocks_to_swap`` is refused
there), and ``training/fsdp2.shard_model`` hands each block to ``fully_shard`` after
:func:`~dit_lora.modeling.host_parking.unpark`, one at a time.

**Composing with Wan's experts.** :class:`~dit_lora.families.wan.experts.WanExperts` parks the idle A14B expert with
:mod:`.host_parking`'s helpers (``frozen_slots``, ``set_tensor``, ``host_copy``, ``follow_dtype``); its slots skip
swapped blocks (``swap_state``), so the expert switch moves the rest and each expert's swapped blocks come and go
with their own hooks.

**Where.** This module chooses the blocks (:func:`swapped_blocks`), checks the config, parks them at load
(:func:`park_blocks`) and installs the swap (:func:`install`); the parking itself is :mod:`.host_parking`'s, the
hooks :mod:`.swap_hooks`'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from dit_lora.core.engine import decide_engine
from dit_lora.core.errors import UserError
from dit_lora.modeling.ddp_ignore import ignore_in_ddp
from dit_lora.modeling.host_parking import frozen_slots, park_block
from dit_lora.modeling.swap_hooks import INSTALLED_ATTRIBUTE, BlockSwap

if TYPE_CHECKING:
    from dit_lora.config.schema import ModelOptions, PerformanceOptions

#: --quantize_base choices whose weights a pointer change cannot move (bitsandbytes keeps the quantization state
#: beside the tensor, torchao's fp8 weights are tensor subclasses)
LIBRARY_QUANTIZED = ("nf4", "int8", "fp8")


def block_lists(model: nn.Module, paths: Sequence[str]) -> list[list[nn.Module]]:
    """The lists of repeated blocks the attribute ``paths`` name on ``model`` (paths it lacks are skipped)."""
    found = []
    for path in paths:
        try:
            blocks = model.get_submodule(path)
        except AttributeError:
            continue
        found.append(list(blocks.children()))
    return found


def per_list_counts(lengths: Sequence[int], count: int) -> list[int]:
    """How many of each block list (``lengths``: their block counts) ``--blocks_to_swap count`` swaps: ``count`` of
    the longest, and of a shorter list the same share of its blocks, rounded up (at least one block of a list
    stays on the device). Lists of one length (one transformer, or Wan's two experts) swap ``count`` each; FLUX.2
    [dev]'s 8 double and 48 single blocks swap 1 + 1 at ``count`` 1, 4 + 20 at 20 and 7 + 47 at 47. Sharing by
    count rather than bytes keeps N a number a user reads off the longest list (musubi-tuner also splits one N
    over FLUX's two lists)."""
    if count <= 0 or not lengths:
        return [0 for _ in lengths]
    longest = max(lengths)
    return [max(0, min(math.ceil(count * length / longest), length - 1)) for length in lengths]


def swapped_blocks(model: nn.Module, paths: Sequence[str], count: int, family: str = "this") -> list[list[nn.Module]]:
    """The blocks ``--blocks_to_swap count`` swaps of each of ``model``'s block lists (the last of each, as many as
    :func:`per_list_counts` says), in execution order; a family without a list the model has, or a count the
    lists cannot give, is refused in one paragraph."""
    lists = block_lists(model, paths)
    if not lists:
        raise UserError(
            f"--blocks_to_swap {count}: the `{family}` family's model has none of the block lists its spec names "
            f"({', '.join(paths) or 'none'}: FamilyInfo.block_lists), so there is nothing to swap. Train without "
            "--blocks_to_swap (or 0)."
        )
    longest = max(len(blocks) for blocks in lists)
    if count >= longest:
        raise UserError(too_many_blocks(count, longest))
    counts = per_list_counts([len(blocks) for blocks in lists], count)
    return [blocks[len(blocks) - n :] if n > 0 else [] for blocks, n in zip(lists, counts)]


def too_many_blocks(count: int, depth: int) -> str:
    """The paragraph refusing ``--blocks_to_swap count`` of a model of ``depth`` blocks."""
    return (
        f"--blocks_to_swap {count} asks for {'all' if count == depth else 'more than all'} of the model's {depth} "
        "blocks. At least one block must stay on the device: its forward is when the first swapped block's copy "
        f"arrives. Use at most --blocks_to_swap {depth - 1} (each swapped block saves its frozen weights on the "
        "device and costs one host-to-device copy per forward and one per backward)."
    )


def swap_bytes(model: nn.Module, paths: Sequence[str], count: int) -> tuple[int, int]:
    """``(frozen bytes of the swapped blocks, the largest swapped block's)`` of ``model`` (meta modules count too:
    the memory plan's)."""
    if count <= 0:
        return 0, 0
    sizes = [
        sum(t.numel() * t.element_size() for _, _, t in frozen_slots(block))
        for blocks in swapped_blocks(model, paths, count)
        for block in blocks
    ]
    return sum(sizes), max(sizes, default=0)


def check_config(
    performance: PerformanceOptions, model: ModelOptions, family: str, paths: Sequence[str], depth: int | None
) -> None:
    """Refuse, before anything loads, a ``--blocks_to_swap`` this run cannot take (one paragraph each): a family
    without a block list, ``--compile``, a library-quantized base, more blocks than the model has (``depth``, when
    its config says; else checked when the blocks are found)."""
    count = int(performance.blocks_to_swap)
    if count <= 0:
        return
    if not paths:
        raise UserError(
            f"--blocks_to_swap {count}: the `{family}` family names no list of repeated blocks "
            "(FamilyInfo.block_lists), so there are no blocks to swap. Train without --blocks_to_swap; to save memory, "
            "keep --gradient_checkpointing on or lower --train_batch_size (`dit-lora plan` says what fits)."
        )
    if performance.compile != "off":
        raise UserError(
            f"--blocks_to_swap {count} cannot run with --compile {performance.compile}: the swap moves each block's weights "
            "in hooks around the block and in autograd's saved-tensor hooks, which a compiled block would trace. "
            "Use --compile off with --blocks_to_swap, or drop --blocks_to_swap."
        )
    if model.quantize_base in LIBRARY_QUANTIZED:
        raise UserError(
            f"--blocks_to_swap {count} cannot swap a --quantize_base {model.quantize_base} model: bitsandbytes keeps "
            "its quantization state beside each weight and torchao's fp8 weights are tensor subclasses, which the "
            "swap's pointer changes cannot move. Use one of the two: the swap with the unquantized base (or "
            "--quantize_base fp8_scaled, whose plain buffers swap), or the quantized base without --blocks_to_swap."
        )
    if depth is not None and count >= depth:
        raise UserError(too_many_blocks(count, depth))


def park_blocks(model: nn.Module, paths: Sequence[str], count: int, device: torch.device | str) -> int:
    """Park the frozen tensors of the last ``count`` blocks of each block list of ``model`` in host memory (pinned
    copies for CUDA) and keep them there through ``model.to(...)``: a family's loader calls it before it moves the
    model to ``device``, with nothing trained yet (those blocks are frozen here, as every loader freezes its model).
    Returns the number of blocks parked (0: ``count`` is 0).

    Under FSDP2 (``--blocks_to_swap`` is refused there) every block of every list is parked instead, unpinned (one
    synchronous copy each, made by ``fully_shard``): the training setup's ``fsdp2.shard_model`` brings them to the
    device one at a time to shard them (:func:`~.host_parking.unpark`), so no process ever holds the whole model on its device."""
    if decide_engine().name == "fsdp2":
        blocks, pin = [block for found in block_lists(model, paths) for block in found], False
    elif count <= 0:
        return 0
    else:
        blocks, pin = [block for found in swapped_blocks(model, paths, count) for block in found], None
    for block in blocks:
        block.requires_grad_(False)
        park_block(block, torch.device(device), pin=pin)
    return len(blocks)


def installed(model: nn.Module) -> BlockSwap | None:
    """The :class:`~.swap_hooks.BlockSwap` :func:`install` put on ``model`` (None: no swap)."""
    return cast("BlockSwap | None", model.__dict__.get(INSTALLED_ATTRIBUTE))


def install(
    model: nn.Module, paths: Sequence[str], count: int, device: torch.device | str, family: str = "this"
) -> BlockSwap | None:
    """Swap the last blocks of each of ``model``'s block lists (``paths``; how many of each: :func:`per_list_counts`
    of ``count``) on ``device``: park those the
    loader has not (their device copies dropped), hook them, and keep their frozen tensors out of DDP (frozen and
    the same on every rank, and in host memory where DDP's device checks and broadcasts expect the device).
    None when ``count`` is 0. Call it after LoRA is attached and before ``accelerator.prepare``."""
    if count <= 0:
        return None
    device = torch.device(device)
    lists = swapped_blocks(model, paths, count, family)
    states = [[park_block(block, device) for block in blocks] for blocks in lists]
    for state in (s for found in states for s in found):
        state.device = device
    first_resident = {}  # each list's first swapped block -> the block before it, which starts its copy
    for blocks, found in zip(block_lists(model, paths), states):
        if found:  # a list of one block swaps none
            first_resident[found[0]] = blocks[len(blocks) - len(found) - 1]
    swap = BlockSwap(model, [found for found in states if found], device)
    swap.hook(first_resident)
    _keep_out_of_ddp(model, swap)
    model.__dict__[INSTALLED_ATTRIBUTE] = swap
    return swap


def _keep_out_of_ddp(model: nn.Module, swap: BlockSwap) -> None:
    """Name the swapped frozen tensors in ``_ddp_params_and_buffers_to_ignore`` (read by DDP when it wraps ``model``)."""
    ids = {id(t) for s in swap.states.values() for _, _, t in frozen_slots(s.module)}
    names = [n for n, t in model.named_parameters(remove_duplicate=False) if id(t) in ids]
    names += [n for n, t in model.named_buffers(remove_duplicate=False) if id(t) in ids]
    ignore_in_ddp(model, names)
