"""The hooks of ``--blocks_to_swap`` (:class:`BlockSwap`): each swapped block brought to the device for its forward
and backward, the next one's copy started meanwhile, autograd's saved references to the device copies rebuilt at
unpack, every block parked when the backward ends. Why it works this way: :mod:`.block_swap`'s docstring.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from dit_lora.modeling import activation_offload
from dit_lora.modeling.host_parking import STATE_ATTRIBUTE, SwapState, frozen_slots, park_state, set_tensor

#: the attribute of a model holding its installed :class:`BlockSwap`
INSTALLED_ATTRIBUTE = "_dit_lora_block_swapper"


@dataclass(frozen=True)
class _SavedWeight:
    """A saved tensor that lives in a swapped block's device copy: rebuilt from the block's copy at unpack."""

    state: SwapState
    tensor: torch.Tensor  # the block's frozen tensor whose storage it viewed
    dtype: torch.dtype
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


_in_backward = activation_offload.in_backward


def _outer_saved_tensor_hooks() -> bool:
    """Whether other saved-tensor hooks are active (a non-reentrant checkpoint's), or they are disabled."""
    autograd = torch._C._autograd
    enabled = getattr(autograd, "_saved_tensors_hooks_is_enabled", lambda: True)
    top = getattr(autograd, "_top_saved_tensors_default_hooks", None)
    return not enabled() or (top is not None and top(False) is not None)


@dataclass
class SwapStats:
    """What the swap did (tests, benchmarks): block copies made and the most bytes of device copies at once."""

    copies: int = 0
    peak_bytes: int = 0


class BlockSwap:
    """The hooks of the swapped blocks of one model (:func:`.block_swap.install`); see :mod:`.block_swap`'s docstring."""

    def __init__(self, model: nn.Module, lists: list[list[SwapState]], device: torch.device) -> None:
        self.model, self.lists, self.device = model, lists, device
        self.states = {id(state.module): state for states in lists for state in states}
        self.resident: dict[SwapState, None] = {}  # on the device or arriving, oldest first
        self.current: tuple[SwapState, bool] | None = None  # the block in use and whether in a backward
        self.stats = SwapStats()
        self._end_queued = False  # a callback parks every block when the running backward ends
        self._side = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._handles: list[Any] = []
        for states in lists:
            for previous, state in zip([None, *states[:-1]], states):
                state.previous = previous
                if previous is not None:
                    previous.following = state

    def hook(self, first_resident: dict[SwapState, nn.Module]) -> None:
        """Register the forward hooks (and, for each list, a pre-hook on the block before its first swapped one that
        starts that block's copy)."""
        for state in self.states.values():
            self._handles.append(state.module.register_forward_pre_hook(self._before))
            self._handles.append(state.module.register_forward_hook(self._after, always_call=True))
        for state, before in first_resident.items():
            self._handles.append(before.register_forward_pre_hook(functools.partial(self._ahead_of, state)))

    # -- hooks
    def _ahead_of(self, state: SwapState, module: nn.Module, args: Any) -> None:
        if not _in_backward():
            self._bring(state)

    def _before(self, module: nn.Module, args: Any) -> None:
        state = self.states[id(module)]
        backward = _in_backward()
        if backward:
            self._queue_end()
        else:
            self._end_queued = False  # a backward that stopped early left none behind to wait for
        self._enter(state, backward)
        # --activation_offloading's hooks below these: chained (what the swap does not keep goes to them)
        outer = activation_offload.chained()
        if torch.is_grad_enabled() and (outer is not None or not _outer_saved_tensor_hooks()):
            state.saving = torch.autograd.graph.saved_tensors_hooks(
                functools.partial(self._pack, state, outer), functools.partial(self._unpack, outer)
            )
            state.saving.__enter__()

    def _after(self, module: nn.Module, args: Any, output: Any) -> None:
        state = self.states[id(module)]
        if state.saving is not None:
            state.saving.__exit__(None, None, None)
            state.saving = None
        # In a backward (a recomputation) the block's own backward nodes come next: the next block entered, or the
        # backward's end, parks it. The backward starts with the last block of its list: it stays for it.
        if not (_in_backward() or (state.following is None and torch.is_grad_enabled())):
            self._park(state)

    def _pack(self, state: SwapState, outer: activation_offload.ActivationOffload | None, tensor: torch.Tensor) -> Any:
        if tensor.layout is torch.strided and tensor.numel() and tensor.device.type == state.device.type:
            try:
                owner = state.storages.get(tensor.untyped_storage().data_ptr())
            except (RuntimeError, NotImplementedError):  # a wrapper subclass has no storage of its own
                owner = None
            if owner is not None:
                offset, size, stride = int(tensor.storage_offset()), tuple(tensor.size()), tuple(tensor.stride())
                return _SavedWeight(state, owner, tensor.dtype, offset, size, stride)
        if outer is not None:
            return outer.pack(tensor)
        return tensor.detach()  # an alias: the tensor itself would tie an output to its own grad_fn (a cycle)

    def _unpack(self, outer: activation_offload.ActivationOffload | None, saved: Any) -> torch.Tensor:
        if not isinstance(saved, _SavedWeight):
            return outer.unpack(saved) if outer is not None else cast(torch.Tensor, saved)
        if _in_backward():
            self._queue_end()
        state = saved.state
        if self.current != (state, True) or not state.resident or state.ready is not None:
            self._enter(state, backward=True)
        out = torch.empty(0, dtype=saved.dtype, device=saved.tensor.device)
        with torch.no_grad():
            out.set_(saved.tensor.untyped_storage(), saved.offset, saved.size, saved.stride)
        return out

    # -- moving
    def _enter(self, state: SwapState, backward: bool) -> None:
        """``state``'s block is next to compute: on the device (waited for), the next one in this direction on its
        way, every other swapped block parked."""
        ahead = state.previous if backward else state.following
        for other in list(self.resident):
            if other is not state and other is not ahead:
                self._park(other)
        self._bring(state)
        if state.ready is not None:  # CUDA: the compute stream waits for the copies and owns them from here
            stream = torch.cuda.current_stream(state.device)
            stream.wait_event(state.ready)
            for tensor, _ in state.moved:
                tensor.record_stream(stream)
            state.ready = None
        if ahead is not None:
            self._bring(ahead)
        self.current = (state, backward)

    def _bring(self, state: SwapState) -> None:
        """Start copying the block's frozen tensors to the device (on the side stream on CUDA); no-op if there."""
        if state.resident:
            return
        side = torch.cuda.stream(self._side) if self._side is not None else contextlib.nullcontext()
        with torch.no_grad(), side:
            for _, _, tensor in frozen_slots(state.module):
                host = tensor.data
                copy = torch.empty_like(host, device=state.device)
                copy.copy_(host, non_blocking=True)
                state.moved.append((tensor, host))
                set_tensor(tensor, copy)
                if copy.numel():
                    state.storages[copy.untyped_storage().data_ptr()] = tensor
            if self._side is not None:
                state.ready = self._side.record_event()
        self.resident[state] = None
        self.stats.copies += 1
        self.stats.peak_bytes = max(self.stats.peak_bytes, sum(s.device_bytes() for s in self.resident))

    def _park(self, state: SwapState) -> None:
        park_state(state)
        self.resident.pop(state, None)
        if self.current is not None and self.current[0] is state:
            self.current = None

    def _queue_end(self) -> None:
        if not self._end_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
            self._end_queued = True

    def _backward_done(self) -> None:
        self._end_queued = False
        self.park_all()

    # -- public
    def park_all(self) -> None:
        """Park every swapped block (between steps they all are)."""
        for state in list(self.resident):
            self._park(state)
        self.current = None

    def device_bytes(self) -> int:
        """Bytes of the swapped blocks' device copies now."""
        return sum(state.device_bytes() for state in self.resident)

    def describe(self) -> str:
        """One line for the run's log."""
        blocks = sum(len(states) for states in self.lists)
        host = sum(t.numel() * t.element_size() for s in self.states.values() for _, _, t in frozen_slots(s.module))
        where = "pinned host memory" if self.device.type == "cuda" else "host memory (the CPU is the device here)"
        return (
            f"block swap: {blocks} block(s)' frozen weights ({host / 2**30:.2f} GiB) wait in {where} and come to "
            f"{self.device.type} for each forward and backward, the next block's copy "
            f"{'on a side stream' if self._side is not None else 'made'} while the current one computes"
        )

    def remove(self) -> None:
        """Take the hooks off and put every swapped block's frozen tensors on the device for good."""
        self.park_all()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        with torch.no_grad():
            for state in self.states.values():
                for _, _, tensor in frozen_slots(state.module):
                    copy = torch.empty_like(tensor.data, device=state.device)
                    set_tensor(tensor, copy.copy_(tensor.data))
                del state.module.__dict__[STATE_ATTRIBUTE], state.module.__dict__["_apply"]
        self.model.__dict__.pop(INSTALLED_ATTRIBUTE, None)
