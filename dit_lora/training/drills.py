"""Drills and debug modes of a run, read in one place: ``Hooks.from_config`` at setup.

Production code asks the :class:`Hooks` of its run instead of reading environment variables or fault
specs itself. Three switches exist, each for proving a promise:

* ``--inject_faults SPEC`` (:class:`~.faults.FaultInjector`): NaN/Inf batches, losses, gradients and broken
  kernels at chosen steps, to show that a bad step changes nothing and a persistent one is rolled back;
* ``DIT_LORA_FAULT=<point>:<n>``: the process dies at a crash point, as a SIGKILL would, to show that a
  killed run resumes bit for bit. Points: ``micro_batch`` (after the n-th micro-batch of the run),
  ``checkpoint_before_marker`` and ``checkpoint_after_rename`` (the last instants of the save of step n);
* ``DIT_LORA_SYNC_DEBUG=1`` (:class:`~.sync_audit.SyncAudit`): any host sync inside a step raises;
* ``DIT_LORA_SIGNAL=<point>:<n>[:INT][@rank]``: the process sends itself SIGTERM (or SIGINT) at a crash point
  or ``validation:<step>`` (only on that rank when ``@rank`` is given), to time a stop signal exactly
  (:mod:`.signals`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from dit_lora.core.errors import UserError
from dit_lora.training.faults import FaultInjector
from dit_lora.training.sync_audit import ENV_VAR as SYNC_DEBUG_VAR
from dit_lora.training.sync_audit import SyncAudit

CRASH_VAR = "DIT_LORA_FAULT"
CRASH_POINTS = ("micro_batch", "checkpoint_before_marker", "checkpoint_after_rename")
SIGNAL_VAR = "DIT_LORA_SIGNAL"
SIGNAL_POINTS = (*CRASH_POINTS, "validation")


@dataclass
class Hooks:
    """The run's drills and debug modes (all off in normal use)."""

    injector: FaultInjector | None
    sync_audit: SyncAudit
    crash_at: tuple[str, int] | None = None
    signal_at: tuple[str, int, int] | None = None  # (point, n, signal number)

    @classmethod
    def from_config(cls, inject_faults: str | None, rank: int, device: torch.device) -> Hooks:
        """Parse every switch once; a malformed one stops the run before anything loads."""
        return cls(
            injector=FaultInjector.from_spec(inject_faults, rank),
            sync_audit=SyncAudit(device, os.environ.get(SYNC_DEBUG_VAR) == "1"),
            crash_at=_crash_point(os.environ.get(CRASH_VAR)),
            signal_at=_signal_point(os.environ.get(SIGNAL_VAR), rank),
        )

    def crash_point(self, name: str, n: int) -> None:
        """Die here, as a SIGKILL would, when this is the configured crash point."""
        if self.crash_at == (name, n):
            os._exit(137)
        if self.signal_at is not None and self.signal_at[:2] == (name, n):
            os.kill(os.getpid(), self.signal_at[2])


def _crash_point(raw: str | None) -> tuple[str, int] | None:
    if not raw:
        return None
    name, _, n = raw.partition(":")
    if name not in CRASH_POINTS or not n.isdigit():
        raise UserError(
            f"{CRASH_VAR}={raw!r} is not a crash point: use <point>:<n> with point one of "
            f"{', '.join(CRASH_POINTS)} (e.g. micro_batch:6), or unset it."
        )
    return name, int(n)


def _signal_point(raw: str | None, rank: int) -> tuple[str, int, int] | None:
    if not raw:
        return None
    import signal

    spec, _, only_rank = raw.partition("@")
    name, _, rest = spec.partition(":")
    n, _, sig = rest.partition(":")
    if (
        name not in SIGNAL_POINTS
        or not n.isdigit()
        or sig not in ("", "TERM", "INT")
        or (only_rank and not only_rank.isdigit())
    ):
        raise UserError(
            f"{SIGNAL_VAR}={raw!r} is not a signal point: use <point>:<n>[:TERM|INT][@rank] with point "
            f"one of {', '.join(SIGNAL_POINTS)} (e.g. micro_batch:6:INT), or unset it."
        )
    if only_rank and int(only_rank) != rank:
        return None
    return name, int(n), int(signal.SIGINT if sig == "INT" else signal.SIGTERM)


__all__ = ["CRASH_POINTS", "CRASH_VAR", "SIGNAL_POINTS", "SIGNAL_VAR", "Hooks"]
