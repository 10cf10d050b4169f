"""Prove the training step never waits for the device: a debug mode that refuses host syncs.

``DIT_LORA_SYNC_DEBUG=1`` turns it on for a run (tests and drills; off in normal use):

* on CUDA, each micro-batch runs under ``torch.cuda.set_sync_debug_mode("error")``, so any
  synchronizing call (``.item()``, ``bool(t)``, a blocking host-to-device copy, ``nonzero``) raises;
* on a CPU there is no device to wait for, so a :class:`TorchDispatchMode` watches the ops instead
  and raises on the ones that would sync on a GPU: reading a tensor's value on the host
  (``aten._local_scalar_dense``: ``.item()``, ``float(t)``, ``bool(t)``) and ops whose output
  shape depends on values (``nonzero`` and friends).

What runs on purpose at check steps (the kernel check, the guard's counter read) is wrapped in
:meth:`SyncAudit.allowed`. Copies between devices cannot be seen on a CPU (there is only one);
the CUDA mode covers them.
"""

from __future__ import annotations

import contextlib
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ENV_VAR = "DIT_LORA_SYNC_DEBUG"

# Ops that make the host wait for the device on CUDA (their result must be read back to continue).
_SYNCING_OPS = {
    "aten::_local_scalar_dense",  # .item(), float(t), int(t), bool(t)
    "aten::nonzero", "aten::nonzero_static", "aten::masked_select", "aten::unique_consecutive",
    "aten::_unique2", "aten::repeat_interleave", "aten::equal", "aten::is_nonzero",
}


class HostSyncError(RuntimeError):
    """A host sync inside the training step, with where it happened."""


class _RefuseSyncs(TorchDispatchMode):
    def __init__(self, audit: "SyncAudit"):
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name in _SYNCING_OPS and not self.audit.paused:
            where = "".join(traceback.format_stack(limit=12)[:-2])
            raise HostSyncError(f"host sync inside the training step: {name}\n{where}")
        return func(*args, **(kwargs or {}))


class SyncAudit:
    """The run's sync debug mode: :meth:`step` around each micro-batch, :meth:`allowed` around checks."""

    def __init__(self, device: torch.device, enabled: bool):
        self.device, self.enabled, self.paused = torch.device(device), enabled, False

    @contextlib.contextmanager
    def step(self):
        """Refuse host syncs inside the block (a no-op when the audit is off)."""
        if not self.enabled:
            yield
            return
        if self.device.type == "cuda":
            torch.cuda.set_sync_debug_mode("error")
            try:
                yield
            finally:
                torch.cuda.set_sync_debug_mode("default")
            return
        with _RefuseSyncs(self):
            yield

    @contextlib.contextmanager
    def allowed(self):
        """Syncs that are the point of the block (a sampled kernel check) pass."""
        if not self.enabled:
            yield
            return
        cuda = self.device.type == "cuda"
        self.paused = True
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        try:
            yield
        finally:
            self.paused = False
            if cuda:
                torch.cuda.set_sync_debug_mode("error")
