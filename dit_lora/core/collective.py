"""Failures every process learns of: one rank failing alone must not leave the others waiting at a barrier.

Under several processes the ranks meet at collectives (barriers, broadcasts). A rank that raises between two of
them never reaches the next one, and the others wait there for ever (or pair that barrier with a later, unrelated
one). So where one rank's part may fail (a check on the main process, a checkpoint's files, the export), each rank
catches its own failure and the ranks exchange what failed where they would have met anyway: every rank raises,
or none does. A :class:`~dit_lora.core.errors.UserError` is raised with the same paragraph on every rank; any other
error is re-raised (with its traceback) on the rank it happened on, and the others raise a paragraph naming
that rank and saying where to read why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from dit_lora.core.errors import UserError, report_traceback
from dit_lora.core.fileio import DiskFullError

T = TypeVar("T")


@dataclass(frozen=True)
class Failure:
    """What one rank's part raised, in a form every rank can receive (exceptions do not always pickle)."""

    rank: int
    text: str  # a UserError's paragraph, or "TypeName: first line" of any other error
    user: bool  # a UserError: ``text`` is for the user as it is
    exit_code: int = 2
    disk_full: bool = False

    @classmethod
    def of(cls, err: BaseException, rank: int, disk_full: bool = False) -> Failure:
        """Describe ``err``, raised on ``rank``."""
        if isinstance(err, UserError):
            return cls(rank, str(err), True, err.exit_code, disk_full or isinstance(err, DiskFullError))
        lines = str(err).strip().splitlines()
        return cls(
            rank, f"{type(err).__name__}: {lines[0][:300] if lines else ''}".rstrip(": "), False, disk_full=disk_full
        )

    def error(self) -> UserError:
        """The :class:`UserError` a rank raises for this failure (:class:`DiskFullError` for a full disk)."""
        err = (DiskFullError if self.disk_full else UserError)(self.text)
        err.exit_code = self.exit_code
        return err


def exchange(accelerator, failure: Failure | None) -> list[Failure]:
    """Every rank's failure at this point, in rank order ([] when all succeeded). All ranks must call it at the
    same point: it is a collective (it also serves as the barrier there)."""
    if accelerator.num_processes == 1:
        return [failure] if failure is not None else []
    from accelerate.utils import gather_object

    return [f for f in gather_object([failure]) if f is not None]


def share(accelerator, value: T) -> T:
    """The main process's ``value`` on every rank (a broadcast; every rank calls it)."""
    if accelerator.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]


def main_process_check(
    accelerator, check: Callable[[], T], *, what: str = "running a start-up check", share_result: bool = False
) -> T | None:
    """Run ``check`` on the main process only; when it raises, every process raises.

    The other ranks wait for the outcome (a broadcast) instead of running on into a collective the main process never
    reaches. A :class:`UserError` is raised with the same paragraph everywhere; any other error is re-raised on the
    main process and is a :class:`UserError` on the others naming ``what`` failed (exit 2). Returns the check's
    result on the main process, and on the others too with ``share_result`` (it must pickle), else None there.
    """
    failure, result, own = None, None, None
    if accelerator.is_main_process:
        try:
            result = check()
        except Exception as err:
            own, failure = err, Failure.of(err, accelerator.process_index)
            if not failure.user and accelerator.num_processes > 1:
                # printed before the others hear of it: once one of them ends, the launcher stops this process, which
                # then may never reach its own traceback
                report_traceback(err)
    failure, shared = share(accelerator, (failure, result if share_result else None))
    if own is not None:
        raise own
    if failure is not None:
        raise (
            failure.error()
            if failure.user
            else UserError(
                f"The main process (rank 0) failed while {what} ({failure.text}), so this process stops too. The main "
                "process's own error, printed above with its traceback, says why: fix that and run again."
            )
        )
    return result if accelerator.is_main_process else shared


__all__ = ["Failure", "exchange", "main_process_check", "share"]
