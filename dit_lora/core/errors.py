"""User-facing errors: one paragraph that names the problem, the file or flag, and the fix."""

from __future__ import annotations

import logging
import os
import sys
import textwrap
import traceback
from collections.abc import Callable
from typing import NoReturn


class UserError(Exception):
    """A problem with the user's config, data or environment.

    The message is shown as-is (no traceback), so it must name what is wrong, where
    (file or flag), and how to fix it.
    """

    exit_code = 2


class Interrupted(BaseException):
    """The run was stopped by a signal (SIGTERM, SIGINT, SIGHUP); ``exit_code`` is 143, 130 or 129.

    A ``BaseException``, like ``KeyboardInterrupt``: a library's ``except Exception`` (a data loader that
    quarantines a sample it could not read, say) must not take a stop request for a bad sample. The message is
    one paragraph (where the run stopped, what was saved, how to resume); empty on ranks that stay quiet.
    """

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def format_error(err: BaseException) -> str:
    """Render an error as one wrapped paragraph prefixed with ``error:``."""
    text = " ".join(str(err).split())
    # Never break inside a word: a hyphen break turns `dit-lora launch` or `--output_dir` into two pieces that no
    # longer work when copied, and a long path split in two is no path at all.
    return textwrap.fill(f"error: {text}", width=100, break_on_hyphens=False, break_long_words=False)


_REPORTED = "_dit_lora_traceback_printed"


def report_traceback(err: BaseException) -> None:
    """Print ``err``'s traceback to stderr now (flushed) and mark it, so :func:`run_cli` does not print it again: for an
    error the other processes are about to hear of (they end, and the launcher then stops this process)."""
    traceback.print_exception(err, file=sys.stderr)
    sys.stderr.flush()
    try:
        setattr(err, _REPORTED, True)
    except AttributeError:  # an exception type with __slots__: printed twice at worst
        pass


def _in_process_group() -> bool:
    """Whether the process is in a torch.distributed process group (imports nothing when torch.distributed was never
    loaded). Such a process is never torn down: it leaves with :func:`_exit_process`.

    Destroying a gloo group, by ``destroy_process_group`` or at interpreter shutdown, sometimes aborts the process in
    a C++ destructor ("terminate called without an active exception", exit -6): a multi-process run, refused, stopped
    or finished, ended as 134 under torchrun instead of its own code (seen about once a full suite on 2 cores, with
    the teardown too). So every ending, an unexpected error's included, leaves with ``os._exit``, which runs no
    destructor.
    """
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:
        return True


def _exit_process(code: int) -> NoReturn:
    """End a process that was in a process group: stdio and logging flushed, then ``os._exit``. Tearing the group
    down was not enough: a finished or stopped two-process run still aborted now and then at interpreter shutdown
    ("terminate called without an active exception", exit 134 instead of 0 or 143), a C++ thread of torch's
    distributed stack destroyed while joinable; no destructor runs after ``os._exit``. Everything dit-lora writes
    is closed and synced before this point (atomic files), and it registers no ``atexit`` handler."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    logging.shutdown()
    os._exit(code)


def run_cli(main: Callable[[], int | None]) -> None:
    """Run ``main`` and turn a :class:`UserError` into a short message and its exit code (2, or 3 for a stopped
    run), an :class:`Interrupted` run into its paragraph and 143 / 130 / 129. A process that joined a process group
    leaves with ``os._exit`` after flushing (:func:`_in_process_group` says why); there an unexpected error prints
    its traceback first and ends with 1, and elsewhere it propagates."""
    try:
        code = main()
    except UserError as err:
        print(format_error(err), file=sys.stderr, flush=True)
        code = err.exit_code
    except Interrupted as err:
        if str(err):  # as written: it may end with a command to copy, which wrapping would break
            print(str(err), file=sys.stderr, flush=True)
        code = err.exit_code
    except KeyboardInterrupt:  # a command that installs no handler of its own (check-data, plan, push)
        print("interrupted (Ctrl-C); stopped (exit 130).", file=sys.stderr, flush=True)
        code = 130
    except Exception as err:
        if not _in_process_group():
            raise
        # Printed before anything else: once another rank ends (its own paragraph, os._exit), the launcher stops
        # this one, and a traceback printed after a teardown was sometimes never printed at all.
        if not getattr(err, _REPORTED, False):
            traceback.print_exc()
        code = 1
    if _in_process_group():
        _exit_process(code or 0)
    sys.exit(code or 0)
