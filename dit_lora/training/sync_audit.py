"""Prove the training step never waits for the device: a debug mode that refuses host syncs.

``DIT_LORA_SYNC_DEBUG=1`` turns it on for a run (tests and drills; off in normal use). Inside each
micro-batch (:meth:`SyncAudit.step`) three watchers refuse what would make the host wait for the device:

* a :class:`TorchDispatchMode` refuses reading a device tensor's value on the host
  (``aten._local_scalar_dense``: ``.item()``, ``float(t)``, ``int(t)``, ``bool(t)``), ops whose output
  shape depends on a device tensor's values (``nonzero`` and friends), and copies that cross between
  the host and the device (``aten._to_copy`` or ``copy_`` from a host tensor into a device tensor or
  back: a host constant moved to the device every step, ``.cpu()`` of a device tensor; a ``non_blocking``
  copy from or into page-locked host memory is no sync and passes: ``--activation_offloading``'s and the block
  swap's copies on their side stream);
* a :class:`TorchFunctionMode` refuses the host reads that never reach the dispatcher on a CPU:
  ``.tolist()``, ``.numpy()`` (and ``np.asarray(t)``), ``.cpu()`` and ``.to("cpu")`` of a device tensor;
* on CUDA, additionally ``torch.cuda.set_sync_debug_mode("error")``, which sees syncs inside kernels
  and libraries that no Python mode sees.

Which tensors are the device's: on an accelerator, those whose ``device`` is not the CPU. On a CPU,
where there is only one device, the audit keeps what a GPU run would have: every tensor is the
device's except the *host* ones, which are the loader's batch before it is moved
(:meth:`SyncAudit.batch_transfer`), tensors a step creates without naming a device
(``torch.tensor(0.0)``) or naming the string ``"cpu"`` (PyTorch's own non-fused optimizers keep their
step counts so, on the host in a GPU run too), and whatever is computed from host tensors only. ``.to(device)`` makes a device
tensor; on a CPU it is never refused itself (there ``"cpu"`` is the training device's name).

Documented exceptions, each visible in the code that needs it:

* :meth:`SyncAudit.allowed` around what runs on purpose at check steps (the sampled kernel check);
* :meth:`SyncAudit.batch_transfer` around moving the loader's batch onto the device (host-to-device
  copies pass there; value reads of device tensors and device-to-host copies are still refused);
* :func:`deliberate` around a host read a code path cannot avoid (the guard's one read per step for a
  non-fused optimizer such as bitsandbytes' 8-bit AdamW, which takes its learning rate and step count
  as host numbers);
* :func:`compiled_region` around a call into a ``torch.compile(fullgraph=True)`` graph inside the step
  (torchao's low-bit AdamW update, :mod:`.lowbit_adam`): Dynamo does not compile under a Python mode, so the
  watchers step aside for the call, after checking that every tensor it is given is the device's. What they
  do not see inside: a full graph holds no ``.item()``, ``.tolist()`` or data-dependent shape (Dynamo refuses
  to capture them unless ``capture_scalar_outputs`` or ``capture_dynamic_output_shape_ops`` is set, which
  the region refuses), and on CUDA the sync debug mode stays on and sees the graph's kernels.

Syncs that pass under an exception are counted by kind in :attr:`SyncAudit.passed`, so a test can
assert *how many* syncs a step takes, not only that none is unexpected.
"""

from __future__ import annotations

import collections
import contextlib
import traceback
import weakref

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

ENV_VAR = "DIT_LORA_SYNC_DEBUG"

# Ops that make the host wait for the device on CUDA (their result must be read back to continue).
_SYNCING_OPS = {
    "aten::_local_scalar_dense",  # .item(), float(t), int(t), bool(t)
    "aten::nonzero",
    "aten::nonzero_static",
    "aten::masked_select",
    "aten::unique_consecutive",
    "aten::_unique2",
    "aten::repeat_interleave",
    "aten::equal",
    "aten::is_nonzero",
}
_COPY_OPS = {"aten::_to_copy", "aten::copy_"}
# Tensor methods that hand a tensor's values (or the tensor) to the host without a dispatcher op on a CPU.
_HOST_READS = {
    torch.Tensor.tolist: "tolist",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.__array__: "__array__",
    torch.Tensor.cpu: "cpu",
    torch.Tensor.to: "to",
}

_ACTIVE: list[SyncAudit] = []  # the audits whose step() is running (innermost last)


class HostSyncError(RuntimeError):
    """A host sync inside the training step, with where it happened."""


def _where() -> str:
    return "".join(traceback.format_stack(limit=14)[:-3])


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class _RefuseSyncs(TorchDispatchMode):
    """Value reads, data-dependent shapes and host/device-crossing copies; tracks host tensors on a CPU."""

    def __init__(self, audit: SyncAudit):
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name, audit = func._schema.name, self.audit
        inputs = _tensors((args, kwargs))
        if name in _SYNCING_OPS:
            if any(audit._on_device(t) for t in inputs):
                audit._check(name)
        elif name in _COPY_OPS:
            crossing = _crossing(audit, name, args, kwargs)
            if crossing is not None:
                audit._check(f"{name} {crossing}", to_device=crossing.startswith("host"))
        out = func(*args, **kwargs)
        if audit.tracking and not func._schema.is_mutable:  # in place: the tensor keeps what it was
            host = bool(inputs) and not any(audit._on_device(t) for t in inputs)
            for t in _tensors(out):
                audit._set_host(t, host)
        return out


def _crossing(audit: SyncAudit, name: str, args, kwargs) -> str | None:
    """'host -> device' or 'device -> host' when a copy op crosses, else None."""
    if name == "aten::_to_copy":
        src, dst_device = args[0], kwargs.get("device")
        if not audit.tracking:
            dst_type = torch.device(dst_device).type if dst_device is not None else src.device.type
            src_type = src.device.type
            if src_type == dst_type:
                return None
            return "host -> device" if src_type == "cpu" else "device -> host"
        return None  # on a CPU: .to(device) is the device's name (see the module docstring); .cpu() is seen above
    dst, src = args[0], args[1] if len(args) > 1 else kwargs.get("src")
    if not isinstance(src, torch.Tensor):
        return None
    src_dev, dst_dev = audit._on_device(src), audit._on_device(dst)
    if src_dev == dst_dev:
        return None
    host = src if dst_dev else dst
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    if non_blocking and host.device.type == "cpu" and host.is_pinned():
        return None  # an asynchronous copy from or into page-locked memory on a stream: the host never waits
    return "host -> device" if dst_dev else "device -> host"


class _RefuseHostReads(TorchFunctionMode):
    """``.tolist()``, ``.numpy()``, ``.cpu()``, ``.to("cpu")`` of a device tensor; where factories put their result."""

    def __init__(self, audit: SyncAudit):
        super().__init__()
        self.audit = audit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        audit = self.audit
        what = _HOST_READS.get(func)
        on_device = what is not None and args and isinstance(args[0], torch.Tensor) and audit._on_device(args[0])
        # On a CPU, .to(device) is the training device's own name: only .cpu() says "to the host".
        if on_device and (what != "to" or (not audit.tracking and _to_host(args[1:], kwargs))):
            audit._check(f"Tensor.{what}()" + (" device -> host" if what in ("cpu", "to") else ""))
        out = func(*args, **kwargs)
        if audit.tracking and isinstance(out, torch.Tensor):
            if what == "to" and _target_device(args[1:], kwargs) is not None:
                audit._set_host(out, False)  # moved onto the device
            elif (
                not isinstance(args[0] if args else None, torch.Tensor)
                and not _tensors((args, kwargs))
                and func not in _TENSOR_METHODS
            ):
                audit._set_host(out, _host_factory(kwargs.get("device")))
        return out


_TENSOR_METHODS = frozenset(v for v in vars(torch.Tensor).values() if callable(v))


def _host_factory(device) -> bool:
    """Whether a factory call's ``device=`` puts its tensor on the host in a GPU run.

    No device, or the literal string ``"cpu"`` (PyTorch's optimizers write ``device="cpu"`` for the step
    counts they keep on the host on purpose): the host. A ``torch.device`` (``x.device``, the run's
    device) or another name: the device.
    """
    return device is None or (isinstance(device, str) and device.split(":")[0] == "cpu")


def _target_device(args, kwargs):
    try:
        return torch._C._nn._parse_to(*args, **kwargs)[0]
    except (TypeError, RuntimeError):  # .to(other_tensor) and the like: the other tensor's device
        other = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        return other.device if other is not None else None


def _to_host(args, kwargs) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` targets the CPU."""
    device = _target_device(args, kwargs)
    return device is not None and torch.device(device).type == "cpu"


class SyncAudit:
    """The run's sync debug mode: :meth:`step` around each micro-batch, :meth:`allowed` around checks."""

    def __init__(self, device: torch.device, enabled: bool):
        self.device, self.enabled, self.paused = torch.device(device), enabled, False
        self.h2d_ok = False
        self.passed: collections.Counter[str] = collections.Counter()  # syncs let through by an exception
        self.steps = 0  # audited blocks (micro-batches) so far
        self.passed_in: collections.Counter[int] = collections.Counter()  # passed syncs per audited block (1-based)
        self.compiled = 0  # calls into compiled graphs, which the Python watchers do not see inside (compiled_region)
        # On a CPU the audit tracks which tensors a GPU run would hold on the host (ids, weak references).
        self.tracking = self.device.type == "cpu"
        self._host: dict[int, weakref.ref[torch.Tensor]] = {}

    # ---- bookkeeping -----------------------------------------------------------------------
    def _set_host(self, t: torch.Tensor, host: bool) -> None:
        key, table = id(t), self._host
        ref = table.get(key)
        known = ref is not None and ref() is t
        if host and not known:

            def forget(r: weakref.ref[torch.Tensor], key: int = key) -> None:
                if table.get(key) is r:  # not a newer tensor's entry under the same id
                    table.pop(key, None)

            try:
                table[key] = weakref.ref(t, forget)
            except TypeError:  # not weak-referenceable (never for plain tensors)
                pass
        elif not host and known:
            del table[key]

    def _on_device(self, t: torch.Tensor) -> bool:
        if not self.tracking:
            return t.device.type != "cpu"
        ref = self._host.get(id(t))
        return ref is None or ref() is not t

    def _check(self, what: str, to_device: bool = False) -> None:
        if self.paused or (to_device and self.h2d_ok):
            self.passed[what] += 1
            self.passed_in[self.steps] += 1
            return
        raise HostSyncError(f"host sync inside the training step: {what}\n{_where()}")

    # ---- the run's uses ----------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self):
        """Refuse host syncs inside the block (a no-op when the audit is off)."""
        if not self.enabled:
            yield
            return
        self.steps += 1
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.set_sync_debug_mode("error")
        _ACTIVE.append(self)
        try:
            with _RefuseHostReads(self), _RefuseSyncs(self):
                yield
        finally:
            _ACTIVE.remove(self)
            if cuda:
                torch.cuda.set_sync_debug_mode("default")

    @contextlib.contextmanager
    def allowed(self):
        """Syncs that are the point of the block (a sampled kernel check) pass."""
        if not self.enabled:
            yield
            return
        cuda = self.device.type == "cuda"
        was = self.paused
        self.paused = True
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        try:
            yield
        finally:
            self.paused = was
            if cuda and not was:
                torch.cuda.set_sync_debug_mode("error")

    @contextlib.contextmanager
    def batch_transfer(self, batch=None):
        """The loader's ``batch`` moves onto the device: host-to-device copies pass, nothing else does.

        ``batch`` (any nesting of tensors) is host data until moved. (On CUDA a blocking copy from pageable
        memory is still refused by the sync debug mode: pin the loader's memory.)
        """
        if self.enabled and self.tracking:
            for t in _tensors(batch):
                self._set_host(t, True)
        was = self.h2d_ok
        self.h2d_ok = True
        try:
            yield
        finally:
            self.h2d_ok = was


@contextlib.contextmanager
def deliberate():
    """A host read the enclosing code cannot avoid passes the running audit (still counted in ``passed``)."""
    audit = _ACTIVE[-1] if _ACTIVE else None
    if audit is None:
        yield
        return
    with audit.allowed():
        yield


@contextlib.contextmanager
def compiled_region(*inputs: torch.Tensor):
    """A call into a ``fullgraph=True`` compiled graph passes the running audit (see the module docstring): every
    tensor in ``inputs`` (all the graph reads) must be the device's, and the audit's Python watchers step aside
    during the call (counted in :attr:`SyncAudit.compiled`); on CUDA the sync debug mode stays on."""
    audit = _ACTIVE[-1] if _ACTIVE else None
    if audit is None or audit.paused:
        yield
        return
    import torch._dynamo.config as dynamo_config

    if dynamo_config.capture_scalar_outputs or dynamo_config.capture_dynamic_output_shape_ops:
        audit._check("a compiled region that may capture .item() or a data-dependent shape")
    for t in inputs:
        if not audit._on_device(t):
            audit._check("a host tensor into a compiled region", to_device=True)
    from torch.overrides import _pop_mode_temporarily as pop_function_mode
    from torch.utils._python_dispatch import _pop_mode_temporarily as pop_dispatch_mode

    with pop_dispatch_mode() as dispatch, pop_function_mode() as function:
        if not (isinstance(dispatch, _RefuseSyncs) and isinstance(function, _RefuseHostReads)):
            raise RuntimeError("compiled_region: the audit's own modes are not the innermost ones")
        audit.compiled += 1
        yield


__all__ = ["ENV_VAR", "HostSyncError", "SyncAudit", "compiled_region", "deliberate"]
