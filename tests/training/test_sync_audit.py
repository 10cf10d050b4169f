"""training/sync_audit.py: the audit's own bookkeeping (off mode, deliberate reads, counting per step).

Which host reads and copies a step refuses is pinned, read by read, in tests/e2e/test_no_host_sync.py
(``test_every_host_read_in_a_step_is_refused`` and its neighbours), next to the demo runs that use the audit.
"""

from __future__ import annotations

import pytest
import torch

from dit_lora.training.sync_audit import HostSyncError, SyncAudit, deliberate


def test_an_audit_that_is_off_refuses_nothing_and_counts_nothing():
    audit = SyncAudit(torch.device("cpu"), enabled=False)
    with audit.step():
        assert torch.ones(2).sum().item() == 2.0
        with audit.allowed():
            pass
    assert audit.steps == 0 and not audit.passed


def test_deliberate_lets_one_read_pass_inside_the_running_step_and_counts_it():
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    x = torch.ones(3)
    with deliberate():  # no audit running: nothing to do
        assert x.sum().item() == 3.0
    with audit.step():
        y = x * 2
        with deliberate():
            assert y.sum().item() == 6.0
        with pytest.raises(HostSyncError, match="host sync inside the training step"):
            y.sum().item()  # the exception ends with the block
    with audit.step():
        with deliberate():
            y.max().item()
            y.min().item()
    assert audit.steps == 2
    assert audit.passed == {"aten::_local_scalar_dense": 3}
    assert audit.passed_in == {1: 1, 2: 2}  # how many syncs each audited block let through


def test_allowed_nests_and_restores_the_refusal():
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    y = torch.ones(2) * 3
    with audit.step():
        with audit.allowed():
            with audit.allowed():
                y.sum().item()
            y.sum().item()  # still allowed: the outer block is open
        with pytest.raises(HostSyncError):
            y.sum().item()
    assert sum(audit.passed.values()) == 2
    y.sum().item()  # outside every step


def test_a_non_blocking_copy_from_pageable_host_memory_is_still_refused():
    """Only an asynchronous copy from or into page-locked memory passes (activation offloading's, the block swap's):
    ``non_blocking`` with a pageable host tensor still makes the host wait, and is refused ('meta' stands in for an
    accelerator; no CPU tensor is pinned without CUDA)."""
    audit = SyncAudit(torch.device("meta"), enabled=True)
    host, device_buf = torch.arange(4.0), torch.empty(4, device="meta")
    with audit.step():
        for copy in (lambda: device_buf.copy_(host, non_blocking=True), lambda: host.copy_(device_buf, True)):
            with pytest.raises(HostSyncError, match="host -> device|device -> host"):
                copy()
