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
there), and ``training/fsdp2.shard_model`` hands each block to ``fully_shard`` after :func:`unpark`, one at a time.

**Composing with Wan's experts.** :class:`~dit_lora.families.wan.experts.WanExperts` parks the idle A14B expert with
the helpers below (:func:`frozen_slots`, :func:`set_tensor`, :func:`host_copy`, :func:`follow_dtype`); its slots
skip swapped blocks (:func:`swap_state`), so the expert switch moves the rest and each expert's swapped blocks come
and go with their own hooks.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from dit_lora.core.engine import decide_engine
from dit_lora.core.errors import UserError
from dit_lora.modeling import activation_offload
from dit_lora.modeling.ddp_ignore import ignore_in_ddp

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: one frozen tensor's place in its module: (``module._parameters`` or ``module._buffers``, key, the tensor)
Slot = tuple[dict, str, torch.Tensor]
#: the attribute of a swapped block holding its :class:`SwapState`; of a model, its installed :class:`BlockSwap`
_STATE, _INSTALLED = "_dit_lora_block_swap", "_dit_lora_block_swapper"
#: --quantize_base choices whose weights a pointer change cannot move (bitsandbytes keeps the quantization state
#: beside the tensor, torchao's fp8 weights are tensor subclasses)
LIBRARY_QUANTIZED = ("nf4", "int8", "fp8")


# ---- host parking: shared with WanExperts -----------------------------------------------------
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
    return cast("SwapState | None", module.__dict__.get(_STATE))


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


# ---- which blocks ----------------------------------------------------------------------------
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


def check_config(cfg: TrainConfig, family: str, paths: Sequence[str], depth: int | None) -> None:
    """Refuse, before anything loads, a ``--blocks_to_swap`` this run cannot take (one paragraph each): a family
    without a block list, ``--compile``, a library-quantized base, more blocks than the model has (``depth``, when
    its config says; else checked when the blocks are found)."""
    count = int(cfg.performance.blocks_to_swap)
    if count <= 0:
        return
    if not paths:
        raise UserError(
            f"--blocks_to_swap {count}: the `{family}` family names no list of repeated blocks "
            "(FamilyInfo.block_lists), so there are no blocks to swap. Train without --blocks_to_swap; to save memory, "
            "keep --gradient_checkpointing on or lower --train_batch_size (`dit-lora plan` says what fits)."
        )
    if cfg.performance.compile != "off":
        raise UserError(
            f"--blocks_to_swap {count} cannot run with --compile {cfg.performance.compile}: the swap moves each block's weights "
            "in hooks around the block and in autograd's saved-tensor hooks, which a compiled block would trace. "
            "Use --compile off with --blocks_to_swap, or drop --blocks_to_swap."
        )
    if cfg.model.quantize_base in LIBRARY_QUANTIZED:
        raise UserError(
            f"--blocks_to_swap {count} cannot swap a --quantize_base {cfg.model.quantize_base} model: bitsandbytes keeps "
            "its quantization state beside each weight and torchao's fp8 weights are tensor subclasses, which the "
            "swap's pointer changes cannot move. Use one of the two: the swap with the unquantized base (or "
            "--quantize_base fp8_scaled, whose plain buffers swap), or the quantized base without --blocks_to_swap."
        )
    if depth is not None and count >= depth:
        raise UserError(too_many_blocks(count, depth))


# ---- the swapped blocks' state --------------------------------------------------------------
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


def park_blocks(model: nn.Module, paths: Sequence[str], count: int, device: torch.device | str) -> int:
    """Park the frozen tensors of the last ``count`` blocks of each block list of ``model`` in host memory (pinned
    copies for CUDA) and keep them there through ``model.to(...)``: a family's loader calls it before it moves the
    model to ``device``, with nothing trained yet (those blocks are frozen here, as every loader freezes its model).
    Returns the number of blocks parked (0: ``count`` is 0).

    Under FSDP2 (``--blocks_to_swap`` is refused there) every block of every list is parked instead, unpinned (one
    synchronous copy each, made by ``fully_shard``): the training setup's ``fsdp2.shard_model`` brings them to the
    device one at a time to shard them (:func:`unpark`), so no process ever holds the whole model on its device."""
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


def unpark(block: nn.Module) -> bool:
    """Make a parked block an ordinary module again, its tensors left where they are (host memory): its next
    ``.to()`` or ``fully_shard`` moves them. False when ``block`` was not parked. Not for an installed swap's
    blocks (:meth:`BlockSwap.remove`)."""
    state = block.__dict__.pop(_STATE, None)
    if state is None:
        return False
    _park_state(state)
    block.__dict__.pop("_apply", None)
    return True


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
    block.__dict__[_STATE] = state
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
    _park_state(state)
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


def _park_state(state: SwapState) -> None:
    """Point the block's frozen tensors back at their host data; its device copies are dropped (no copy back)."""
    for tensor, host in state.moved:
        set_tensor(tensor, host)
    state.moved.clear()
    state.storages.clear()
    state.ready = None


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
    """The hooks of the swapped blocks of one model (:func:`install`); see the module docstring."""

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
        _park_state(state)
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
                del state.module.__dict__[_STATE], state.module.__dict__["_apply"]
        self.model.__dict__.pop(_INSTALLED, None)


def installed(model: nn.Module) -> BlockSwap | None:
    """The :class:`BlockSwap` :func:`install` put on ``model`` (None: no swap)."""
    return cast("BlockSwap | None", model.__dict__.get(_INSTALLED))


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
    model.__dict__[_INSTALLED] = swap
    return swap


def _keep_out_of_ddp(model: nn.Module, swap: BlockSwap) -> None:
    """Name the swapped frozen tensors in ``_ddp_params_and_buffers_to_ignore`` (read by DDP when it wraps ``model``)."""
    ids = {id(t) for s in swap.states.values() for _, _, t in frozen_slots(s.module)}
    names = [n for n, t in model.named_parameters(remove_duplicate=False) if id(t) in ids]
    names += [n for n, t in model.named_buffers(remove_duplicate=False) if id(t) in ids]
    ignore_in_ddp(model, names)


__all__ = [
    "LIBRARY_QUANTIZED",
    "BlockSwap",
    "Slot",
    "SwapState",
    "SwapStats",
    "block_lists",
    "check_config",
    "follow_dtype",
    "frozen_slots",
    "host_copy",
    "install",
    "installed",
    "park_block",
    "park_blocks",
    "per_list_counts",
    "set_tensor",
    "swap_bytes",
    "swap_state",
    "swapped_blocks",
    "too_many_blocks",
    "unpark",
]
