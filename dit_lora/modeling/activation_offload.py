"""``--activation_offloading``: the activations a forward saves for its backward wait in host memory (pinned on
CUDA) instead of on the device, and come back during the backward, the next ones fetched ahead.

**What is offloaded.** Autograd's saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``) see every tensor
a forward saves. :func:`install` pushes them around the forward of each module that owns one of the family's block
lists (``FamilyInfo.block_lists``: the transformer, each Wan A14B expert, a video LLM's language model; the whole
model for a family without a list), so the loss head after it (a video LLM's vocabulary logits) is left alone, as
torchtune leaves its output head. Of what those forwards save, a tensor goes to host memory when (:meth:`offloads`):
it lives on the training device, is a plain strided ``torch.Tensor`` of at least :data:`MIN_OFFLOAD_BYTES` bytes whose
elements do not overlap, and is neither a parameter or buffer of the model, nor a view of one, nor a leaf that
requires grad. Everything else (small tensors, weights, fp8_scaled's buffers, tensor subclasses, broadcast views)
stays as it is. A tensor saved again, the same tensor object with the same version (a block's text states, saved by
every checkpointed block), is copied once and shared. Under autocast the bf16 casts of fp32 weights (the LoRA masters)
are new tensors, and offloaded like activations (small: a LoRA matrix each).

**How, on CUDA.** The copy to a pinned host buffer runs on a side stream after that stream waits for the compute
stream (which produced the tensor); the device tensor is kept until its copy is done: at most
:data:`FORWARD_IN_FLIGHT` copies are in flight, and retiring the oldest makes the *compute stream* wait for its copy's
event (a device-side wait, never the host's) before the device memory is dropped, so the allocator reuses it only
after the copy has read it. The last copies of a forward are still in flight when the backward starts: their device
tensors are used as they are (after the compute stream waits for the copies), as torchtune does. In the backward, the
first unpack of a tensor brings it back into device memory allocated on the compute stream (after the side stream
waits for the compute stream, so nothing still in use is overwritten), on the side stream, and starts bringing the
:data:`PREFETCH` tensors saved before it (the backward runs in reverse); the compute stream waits for the copy's event
before the tensor is used. Because that memory is the compute stream's, autograd frees it when it is done with it,
stream-ordered, with no ``record_stream`` (torchtune's ``OffloadActivations``, ``torchtune/training/
_activation_offloading.py``, allocates it on its side stream and tracks storage use counts and per-node hooks to
know when it may go). A tensor fetched ahead that the backward passes over by :data:`PASSED_OVER` saves (saved for a
node that never runs) leaves the window, and a callback queued on the backward's end drops what is left. No step reads
the device from the host: events and stream waits only (the sync audit in ``tests/e2e/test_activation_offload.py``).

**On a CPU** the same code runs with the streams and events as no-ops: the "host copy" is a copy into fresh CPU
memory and the device tensor is dropped, so every path is exercised and results are bitwise those of a run without
it (the copies are exact, with the saved tensor's own size and strides restored at unpack). It saves nothing there:
host and device memory are the same.

**Gradient checkpointing.** Under torch's non-reentrant checkpoint (the families'), a checkpointed block's inputs are
saved by the checkpoint's own ``_NoopSaveInputs`` before it pushes its hooks, so they pass through these hooks and
are offloaded; what the block computes inside is held by the checkpoint's hooks (innermost hooks win), and its
recomputation in the backward runs outside the forward these hooks cover, under the checkpoint's recomputation hooks:
it is never offloaded. Without checkpointing every block's saved activations are offloaded.

**Composing with ``--blocks_to_swap``.** Only the innermost saved-tensor hooks run, and the swap pushes its own
around each swapped block (:mod:`dit_lora.modeling.block_swap`): when the hooks under them are these (:func:`chained`),
the swap keeps its references to swapped weights and hands every other saved tensor to :meth:`ActivationOffload.pack`
and back to :meth:`ActivationOffload.unpack`. Under checkpointing the swap pushes none, as before.

**Why not torch's ``save_on_cpu``** (``torch/autograd/graph.py``, read in torch 2.13): without ``pin_memory`` its
pack is ``tensor.cpu()``, a copy the host waits for; with it, the copy to the host and the unpack's
``.to(device, non_blocking=True)`` run on the compute stream itself, so every copy still stalls the compute that
follows it, with nothing fetched ahead. And it offloads every saved tensor alike: a frozen weight's ``weight.t()``
(what ``F.linear`` saves) is copied to the host and back at every step, small tensors too, and a saved view comes
back contiguous.

**Exact resume.** Nothing here is state a checkpoint must carry: each step's copies are made and dropped within it.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from dit_lora.core.errors import UserError

if TYPE_CHECKING:
    from dit_lora.config.schema import PerformanceOptions

#: saved tensors smaller than this stay on the device (torchtune's ``min_offload_size``): copying them costs more
#: than they hold
MIN_OFFLOAD_BYTES = 1024
#: device tensors kept alive while their copy to the host runs (the forward's extra device memory)
FORWARD_IN_FLIGHT = 2
#: saved tensors brought back ahead of their use in the backward
PREFETCH = 2
#: a tensor brought back ahead whose use the backward has passed by more than this many saves (one op's saves are
#: adjacent: SDPA's are six) was saved for a node that does not run: its copy is dropped
PASSED_OVER = 16
#: the attribute of an installed model holding its :class:`ActivationOffload`
_INSTALLED = "_dit_lora_activation_offload"


def in_backward() -> bool:
    """Whether autograd's engine is running a backward on this thread (a checkpoint's recomputation included)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def chained() -> ActivationOffload | None:
    """The :class:`ActivationOffload` whose saved-tensor hooks are the innermost ones now (None: others, or none).
    Inner hooks of another lever (the block swap's) hand what they do not keep to it."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    hooks = top(False) if top is not None else None
    owner = getattr(hooks[0], "__self__", None) if hooks else None
    return owner if isinstance(owner, ActivationOffload) else None


def _storage_ptr(tensor: torch.Tensor) -> int | None:
    """The address of ``tensor``'s storage: of its local shard for an FSDP2 (DTensor) parameter, whose wrapper has
    no storage of its own; None for a storage FSDP2 has freed (an unsharded parameter between its uses)."""
    to_local = getattr(tensor, "to_local", None)
    local = to_local() if callable(to_local) else tensor
    try:
        return local.untyped_storage().data_ptr()
    except RuntimeError:
        return None


def non_overlapping(tensor: torch.Tensor) -> bool:
    """Whether no two elements of ``tensor`` share memory (a slice does not; an ``expand``-ed view does)."""
    dims = sorted((stride, size) for size, stride in zip(tensor.shape, tensor.stride()) if size > 1)
    reach = 0  # the largest offset the dimensions of smaller strides reach
    for stride, size in dims:
        if stride <= reach:
            return False
        reach += (size - 1) * stride
    return True


def check_config(performance: PerformanceOptions) -> None:
    """Refuse, before anything loads, what ``--activation_offloading`` cannot run with (one paragraph each)."""
    if not performance.activation_offloading:
        return
    if performance.compile != "off":
        raise UserError(
            f"--activation_offloading cannot run with --compile {performance.compile}: it works through autograd's "
            "saved-tensor hooks around the model's forward, which torch.compile's graphs do not call per tensor. "
            "Use --compile off with --activation_offloading, or drop --activation_offloading."
        )


class _Streams:
    """The compute stream (the current one when called) and a side stream for the copies on CUDA; every method a
    no-op elsewhere."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.side = torch.cuda.Stream(device) if self.cuda else None

    @contextlib.contextmanager
    def copying(self) -> Iterator[None]:
        """Run the copies on the side stream, after everything the compute stream has queued."""
        if self.side is None:
            yield
            return
        self.side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side):
            yield

    def record(self) -> Any:
        """An event after the side stream's copies so far (None off CUDA)."""
        return self.side.record_event() if self.side is not None else None

    def wait(self, event: Any) -> None:
        """The compute stream waits for ``event`` (the host does not)."""
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)


@dataclass(eq=False)
class _Offloaded:
    """One saved tensor whose values wait in host memory: what its pack returned, read back by its unpack."""

    host: torch.Tensor  #: kept until the step's backward ends (a second unpack, retain_graph, finds it)
    size: tuple[int, ...]
    stride: tuple[int, ...]
    index: int  #: its place in the order tensors were packed in
    uses: int = 1  #: packs of it not yet unpacked (a shared tensor is packed once per saver)
    ready: Any = None  #: CUDA event: the last copy (to the host, or back) is done
    original: torch.Tensor | None = None  #: the device tensor, while its copy to the host may run
    version: int = 0  #: the original's version counter when saved
    fetched: torch.Tensor | None = None  #: the device copy brought back (or the original), until its last unpack


@dataclass
class OffloadStats:
    """What the offloading did (log, tests, benchmarks)."""

    offloaded: int = 0  #: tensors copied to host memory
    offloaded_bytes: int = 0
    shared: int = 0  #: saves of a tensor already offloaded (no new copy)
    kept: int = 0  #: saved tensors left on the device
    fetched: int = 0  #: copies brought back in a backward
    peak_host_bytes: int = 0  #: the most bytes of host copies alive at once


@dataclass(eq=False)
class ActivationOffload:
    """The saved-tensor hooks of one model (:func:`install`); see the module docstring."""

    model: nn.Module
    device: torch.device
    min_bytes: int = MIN_OFFLOAD_BYTES
    stats: OffloadStats = field(default_factory=OffloadStats)

    def __post_init__(self) -> None:
        self.streams = _Streams(self.device)
        self.pending: list[_Offloaded] = []  # this step's copies in pack order (the backward's prefetch reads it)
        self.in_flight: deque[_Offloaded] = deque()  # copies to the host that may still run, oldest first
        self.host_bytes = 0
        self._shared: dict[int, list[tuple[weakref.ref, tuple, _Offloaded]]] = {}  # storage -> saves of it
        self._weights: set[int] = set()  # data pointers of the model's parameters and buffers (this forward)
        self._cursor: int | None = None  # the prefetch's next candidate in ``pending`` (downwards; None: not started)
        self.ahead: dict[_Offloaded, None] = {}  # copies brought back ahead of their first unpack, oldest first
        self._end_queued = False
        self._contexts: list[Any] = []  # per hooked forward: the hooks it pushed (None: it pushed none)
        self._handles: list[Any] = []

    # -- the forward hooks
    def enter(self, module: nn.Module, args: Any) -> None:
        """Forward pre-hook of an owner module: push the hooks (not without grad, nor inside a backward)."""
        if not torch.is_grad_enabled() or in_backward() or any(c is not None for c in self._contexts):
            self._contexts.append(None)
            return
        # a new step: what an earlier forward left (a backward that raised, or never ran) is forgotten here; its
        # graph, if alive, still holds its copies
        self._end_queued = False
        self.reset()
        found = (_storage_ptr(t) for t in (*self.model.parameters(), *self.model.buffers()) if t.numel())
        self._weights = {ptr for ptr in found if ptr is not None}
        hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        hooks.__enter__()
        self._contexts.append(hooks)

    def exit(self, module: nn.Module, args: Any, output: Any) -> None:
        """Forward hook (always called) of an owner module: pop what :meth:`enter` pushed."""
        hooks = self._contexts.pop() if self._contexts else None
        if hooks is not None:
            hooks.__exit__(None, None, None)

    # -- pack
    def offloads(self, tensor: torch.Tensor) -> bool:
        """Whether a saved ``tensor`` goes to host memory (the module docstring's rule)."""
        if type(tensor) is not torch.Tensor or tensor.layout is not torch.strided:
            return False
        if tensor.device.type != self.device.type:
            return False
        if tensor.numel() * tensor.element_size() < self.min_bytes or (tensor.is_leaf and tensor.requires_grad):
            return False
        if isinstance(tensor._base, nn.Parameter) or tensor.untyped_storage().data_ptr() in self._weights:
            return False
        return non_overlapping(tensor)

    def pack(self, tensor: torch.Tensor) -> Any:
        """Saved-tensor pack hook: an :class:`_Offloaded` for a tensor that goes to host memory, else an alias."""
        if not self.offloads(tensor):
            self.stats.kept += 1
            return tensor.detach()  # an alias: the tensor itself would tie an output to its own grad_fn (a cycle)
        key = (tensor.storage_offset(), tuple(tensor.size()), tuple(tensor.stride()), tensor.dtype, tensor._version)
        ptr = tensor.untyped_storage().data_ptr()
        for ref, seen, entry in self._shared.get(ptr, ()):
            if seen == key and ref() is tensor and entry.uses > 0:
                entry.uses += 1
                self.stats.shared += 1
                return entry
        entry = self._offload(tensor)
        self._shared.setdefault(ptr, []).append((weakref.ref(tensor), key, entry))
        return entry

    def _offload(self, tensor: torch.Tensor) -> _Offloaded:
        while len(self.in_flight) >= FORWARD_IN_FLIGHT:
            self._retire(self.in_flight.popleft())
        pin = self.streams.cuda
        # the host copy keeps the saved tensor's strides where it is dense (a straight copy), else is contiguous
        host = torch.empty_like(tensor, device=torch.device("cpu"), pin_memory=pin)
        with torch.no_grad(), self.streams.copying():
            host.copy_(tensor, non_blocking=pin)
            ready = self.streams.record()
        entry = _Offloaded(host, tuple(tensor.size()), tuple(tensor.stride()), len(self.pending), ready=ready)
        entry.original, entry.version = tensor, tensor._version
        self.in_flight.append(entry)
        self.pending.append(entry)
        nbytes = host.untyped_storage().nbytes()
        self.host_bytes += nbytes
        self.stats.offloaded += 1
        self.stats.offloaded_bytes += nbytes
        self.stats.peak_host_bytes = max(self.stats.peak_host_bytes, self.host_bytes)
        return entry

    def _retire(self, entry: _Offloaded) -> None:
        """The copy to the host is done, as far as the compute stream knows: the device tensor can go."""
        self.streams.wait(entry.ready)
        entry.ready, entry.original = None, None

    # -- unpack
    def unpack(self, saved: Any) -> torch.Tensor:
        """Saved-tensor unpack hook: the tensor on the device again (the next ones on their way)."""
        if not isinstance(saved, _Offloaded):
            return cast(torch.Tensor, saved)
        if in_backward() and not self._end_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
            self._end_queued = True
        if self.in_flight:  # the forward's last copies: their device tensors serve as they are
            self._keep_originals()
        if saved.fetched is None:
            self._fetch(saved)
        self._prefetch_before(saved)
        out = cast(torch.Tensor, saved.fetched)
        self.streams.wait(saved.ready)
        saved.ready = None
        saved.uses -= 1
        if saved.uses <= 0:  # its last saver has it: the device copy is autograd's alone from here
            saved.fetched = None
        return out

    def _keep_originals(self) -> None:
        while self.in_flight:
            entry = self.in_flight.popleft()
            original = entry.original
            self._retire(entry)
            if original is not None and original._version == entry.version and entry.fetched is None:
                entry.fetched = original

    def _fetch(self, entry: _Offloaded) -> None:
        # allocated on the compute stream, written on the side stream once the compute stream's queued work is
        # done: the memory is the compute stream's when freed again, with no record_stream
        out = torch.empty_strided(entry.size, entry.stride, dtype=entry.host.dtype, device=self.device)
        with torch.no_grad(), self.streams.copying():
            out.copy_(entry.host, non_blocking=self.streams.cuda)
            entry.ready = self.streams.record()
        entry.fetched = out
        self.stats.fetched += 1

    def _prefetch_before(self, entry: _Offloaded) -> None:
        """Keep up to :data:`PREFETCH` copies of the tensors saved before ``entry`` on their way (the backward
        unpacks in about the reverse order of the forward's packs)."""
        self.ahead.pop(entry, None)
        if entry.index >= len(self.pending) or self.pending[entry.index] is not entry:
            return  # a tensor of an earlier step's graph: nothing of this step's order to follow
        for passed in [e for e in self.ahead if e.index > entry.index + PASSED_OVER]:
            # the backward went on without it (a node that never runs): it no longer holds the window; its copy
            # goes (brought again if it is used after all)
            del self.ahead[passed]
            self.streams.wait(passed.ready)
            passed.ready, passed.fetched = None, None
        self._cursor = entry.index - 1 if self._cursor is None else min(self._cursor, entry.index - 1)
        while self._cursor >= 0 and len(self.ahead) < PREFETCH:
            candidate = self.pending[self._cursor]
            self._cursor -= 1
            if candidate.uses > 0 and candidate.fetched is None:
                self._fetch(candidate)
                self.ahead[candidate] = None

    def _backward_done(self) -> None:
        """The backward ended: copies brought back and never used (a backward that needed fewer) are dropped."""
        self._end_queued = False
        for entry in self.pending:
            self._retire(entry)
            entry.fetched = None
        self.reset()

    def reset(self) -> None:
        """Forget this step's copies (the graph that holds them keeps what it still needs)."""
        while self.in_flight:
            self._retire(self.in_flight.popleft())
        self.pending, self._shared, self._cursor, self.host_bytes = [], {}, None, 0
        self.ahead.clear()

    # -- public
    def hook(self, owners: Sequence[nn.Module]) -> None:
        """Register the pre-hook and the (always called) forward hook on each owner module."""
        for module in owners:
            self._handles.append(module.register_forward_pre_hook(self.enter))
            self._handles.append(module.register_forward_hook(self.exit, always_call=True))

    def describe(self, expected_bytes: int | None = None) -> str:
        """One line for the run's log: what is offloaded, where, and the host memory the plan expects."""
        where = (
            "pinned host memory" if self.streams.cuda else "host memory (on a CPU the host is the device: no saving)"
        )
        expect = f"; about {expected_bytes / 2**30:.2f} GiB of host memory per step" if expected_bytes else ""
        return (
            f"activation offloading: the saved activations of the model's forward (each at least {self.min_bytes} "
            f"bytes, not weights or views of them) wait in {where} until the backward, "
            f"{'copied on a side stream' if self.streams.cuda else 'copied'}, {PREFETCH} brought back ahead{expect}"
        )

    def remove(self) -> None:
        """Take the hooks off."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.reset()
        self.model.__dict__.pop(_INSTALLED, None)


def owners(model: nn.Module, paths: Sequence[str]) -> list[nn.Module]:
    """The modules whose forward runs the block lists ``paths`` name (each path's parent; the model for a path of
    one name), outermost first and without repeats; ``[model]`` when it has none of them."""
    found: dict[int, nn.Module] = {}
    for path in paths:
        try:
            model.get_submodule(path)
        except AttributeError:
            continue
        parent = model.get_submodule(path.rpartition(".")[0]) if "." in path else model
        found.setdefault(id(parent), parent)
    return list(found.values()) or [model]


def installed(model: nn.Module) -> ActivationOffload | None:
    """The :class:`ActivationOffload` :func:`install` put on ``model`` (None: none)."""
    return cast("ActivationOffload | None", model.__dict__.get(_INSTALLED))


def install(
    model: nn.Module, paths: Sequence[str], enabled: bool, device: torch.device | str
) -> ActivationOffload | None:
    """Offload the saved activations of the forwards of ``model``'s block-list owners (``paths``: the family's
    ``FamilyInfo.block_lists``) on ``device``; None when not ``enabled``. Call it once, before
    ``accelerator.prepare`` (the hooks sit on the modules DDP wraps)."""
    if not enabled:
        return None
    offload = ActivationOffload(model, torch.device(device))
    offload.hook(owners(model, paths))
    model.__dict__[_INSTALLED] = offload
    return offload


__all__ = [
    "FORWARD_IN_FLIGHT",
    "MIN_OFFLOAD_BYTES",
    "PASSED_OVER",
    "PREFETCH",
    "ActivationOffload",
    "OffloadStats",
    "chained",
    "check_config",
    "in_backward",
    "install",
    "installed",
    "non_overlapping",
    "owners",
]
