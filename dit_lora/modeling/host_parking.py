"""Host parking: a module's frozen tensors (parameters without grad, and buffers) pointed at host copies, and kept
there through ``.to()``; shared by ``--blocks_to_swap`` (:mod:`.block_swap`), the blocks that wait for the latent
cache (:mod:`.cache_parking`), FSDP2's loading and Wan's A14B experts.

A parked block carries its :class:`SwapState` (:func:`swap_state`); its frozen tensors stay the same Python objects
(the optimizer and PEFT hold them) and only their data moves (:func:`set_tensor`). :func:`park_block` parks one
block, :func:`unpark` makes it an ordinary module again, :func:`park_state` drops its device copies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from dit_lora.core.errors import UserError

#: one frozen tensor's place in its module: (``module._parameters`` or ``module._buffers``, key, the tensor)
Slot = tuple[dict, str, torch.Tensor]
#: the attribute of a parked (swapped) block holding its :class:`SwapState`
STATE_ATTRIBUTE = "_dit_lora_block_swap"


def set_tensor(tensor: torch.Tensor, value: torch.Tensor) -> None:
    """Make ``tensor`` (the same Python object: optimizer and PEFT hold it) hold ``value``'s storage.

    ``.data`` works between the CPU and CUDA; for types it cannot join (CPU and meta, the tests' stand-in
    accelerator) the contents are swapped with a new object sharing ``value``'s storage, as ``nn.Module._apply``
    does under ``torch.__future__.set_swap_module_params_on_conversion``.
    """
    if torch._has_compatible_shallow_copy_type(tensor, value):
        tensor.data = value
    else:
        holder = nn.Parameter(value, requires_grad=False) if isinstance(tensor, nn.Parameter) else value.detach()
        torch.utils.swap_tensors(tensor, holder)


def host_copy(tensor: torch.Tensor, *, pin: bool) -> torch.Tensor:
    """``tensor``'s values in CPU memory, page-locked when ``pin`` (CUDA copies from it run asynchronously).
    A CPU tensor that needs no pinning is returned as its own alias: nothing is copied."""
    host = tensor.detach().to("cpu")
    return host.pin_memory() if pin else host


def follow_dtype(host: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``host`` cast to ``dtype`` (pinned again if it was), or itself when it has that dtype already."""
    if host.dtype == dtype:
        return host
    return host.to(dtype).pin_memory() if host.is_pinned() else host.to(dtype)


def swap_state(module: nn.Module) -> SwapState | None:
    """The :class:`SwapState` of a swapped block (None for any other module)."""
    return cast("SwapState | None", module.__dict__.get(STATE_ATTRIBUTE))


def frozen_slots(module: nn.Module, *, skip_swapped: bool = False) -> Iterator[Slot]:
    """``module``'s frozen tensors now (parameters without grad, and buffers), each with where it is held, in
    ``modules()`` order. ``skip_swapped``: leave out the swapped blocks below ``module`` (their swap moves them).
    Read at each use: a parameter unfrozen after load (a backbone group) trains, so it is never parked."""
    seen: set[int] = set()
    stack = [module]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for table, frozen_only in ((current._parameters, True), (current._buffers, False)):
            for key, tensor in table.items():
                if tensor is not None and not (frozen_only and tensor.requires_grad):
                    yield table, key, tensor
        children = [c for c in current._modules.values() if c is not None]
        stack.extend(c for c in reversed(children) if not (skip_swapped and swap_state(c) is not None))


@dataclass(eq=False)
class SwapState:
    """One swapped block: where its copies go, and while it is on the device, what it holds there."""

    module: nn.Module
    device: torch.device
    #: (frozen tensor, the host data it held when brought in) while the block is on the device; empty when parked
    moved: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    #: data pointer of each device copy's storage -> its tensor (the pack hook's lookup)
    storages: dict[int, torch.Tensor] = field(default_factory=dict)
    ready: Any = None  #: CUDA event recorded after the copies, until the compute stream has waited for it
    saving: Any = None  #: the saved-tensor hooks its forward pushed, until its forward hook pops them
    previous: SwapState | None = None  #: the block before in its list (None: the first swapped one)
    following: SwapState | None = None  #: the block after (None: the last of its list)

    @property
    def resident(self) -> bool:
        return bool(self.moved)

    def device_bytes(self) -> int:
        """Bytes of its device copies now (0 when parked)."""
        return sum(t.numel() * t.element_size() for t, _ in self.moved)


def park_block(block: nn.Module, device: torch.device, *, pin: bool | None = None) -> SwapState:
    """``block``'s :class:`SwapState`, parking it first if it is not (its device copies, if any, are dropped).
    ``pin``: page-locked host copies (default: on a CUDA ``device``)."""
    state = swap_state(block)
    if state is not None:
        return state
    slots = list(frozen_slots(block))
    for _, key, tensor in slots:
        if type(tensor) not in (torch.Tensor, nn.Parameter):
            names = {id(t): n for n, t in (*block.named_parameters(), *block.named_buffers())}
            raise UserError(
                f"--blocks_to_swap cannot swap `{names.get(id(tensor), key)}` of a {type(block).__name__}: it is a "
                f"{type(tensor).__name__} "
                "(a quantized or wrapped weight), which the swap's pointer changes cannot move. Train without "
                "--blocks_to_swap, or with an unquantized base."
            )
    for _, _, tensor in slots:
        set_tensor(tensor, host_copy(tensor, pin=device.type == "cuda" if pin is None else pin))
    state = SwapState(block, device)
    block.__dict__[STATE_ATTRIBUTE] = state
    # nn.Module._apply reaches each child through ``child._apply``: an instance attribute guards this block alone
    block.__dict__["_apply"] = functools.partial(_apply_parked, state)
    return state


def _apply_parked(state: SwapState, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> nn.Module:
    """``nn.Module._apply`` (``.to()``, ``.float()``...: accelerate's placement is ``model.to(device)``) of a swapped
    block that leaves its frozen tensors in host memory.

    While the class's ``_apply`` runs each of them is a 0-element placeholder on the swap's device, so nothing of them
    is allocated where ``fn`` sends the block, and where the placeholder lands is the swap's device from then on;
    LoRA weights move as usual. Afterwards each (possibly new) tensor points at its host copy again, cast if ``fn``
    cast the placeholder (pinned kept). A block on the device is parked first.
    """
    block = state.module
    park_state(state)
    slots = list(frozen_slots(block))
    hosts = [tensor.data for _, _, tensor in slots]
    for _, _, tensor in slots:
        set_tensor(tensor, torch.empty(0, dtype=tensor.dtype, device=state.device))
    try:
        type(block)._apply(block, fn, recurse)
    finally:
        for (table, key, _), host in zip(slots, hosts):
            new = table[key]
            state.device = new.device
            set_tensor(new, follow_dtype(host, new.dtype))
    return block


def park_state(state: SwapState) -> None:
    """Point the block's frozen tensors back at their host data; its device copies are dropped (no copy back)."""
    for tensor, host in state.moved:
        set_tensor(tensor, host)
    state.moved.clear()
    state.storages.clear()
    state.ready = None


def unpark(block: nn.Module) -> bool:
    """Make a parked block an ordinary module again, its tensors left where they are (host memory): its next
    ``.to()`` or ``fully_shard`` moves them. False when ``block`` was not parked. Not for an installed swap's
    blocks (:meth:`~.swap_hooks.BlockSwap.remove`)."""
    state = block.__dict__.pop(STATE_ATTRIBUTE, None)
    if state is None:
        return False
    park_state(state)
    block.__dict__.pop("_apply", None)
    return True
