"""What listing the data says (what a source found, how it captions, what it left out), through one logger.

Every process lists the samples; the main one says so (:func:`say`: accelerate's ``RANK`` unset or 0). The lines go
through the ``dit_lora.data.listing`` logger, whose handler writes each to the ``sys.stdout`` of the moment (a
terminal, a test's capture), so they read as the prints they were. While one data set of a dataset config is listed,
its lines are put in that set's terms (:func:`rewritten`: its keys named as its file writes them): the rewrite is held
in a context variable that the logger's filter reads, so only this logger's lines of this thread change. Nothing
replaces ``sys.stdout``, whose redirection would catch every other thread's output too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar

#: the listing's logger: its lines are printed (:class:`Printed`), not passed on to the root logger's handlers
LOGGER = logging.getLogger("dit_lora.data.listing")
_REWRITE: ContextVar[Callable[[str], str] | None] = ContextVar("dit_lora_listing_rewrite", default=None)


class Printed(logging.Handler):
    """Writes each record's message, one line, to the ``sys.stdout`` of the moment, flushed."""

    def emit(self, record: logging.LogRecord) -> None:
        """Print the record's message."""
        try:
            sys.stdout.write(record.getMessage() + "\n")
            sys.stdout.flush()
        except Exception:
            self.handleError(record)


class InTerms(logging.Filter):
    """Rewrites a record's message with the rewrite :func:`rewritten` holds in this context (none: as it is)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the message in place; every record passes."""
        rewrite = _REWRITE.get()
        if rewrite is not None:
            record.msg, record.args = rewrite(record.getMessage()), None
        return True


def _install() -> None:
    """The logger's one handler and filter, at INFO, not propagated (once per process)."""
    if not any(isinstance(h, Printed) for h in LOGGER.handlers):
        LOGGER.addHandler(Printed())
    if not any(isinstance(f, InTerms) for f in LOGGER.filters):
        LOGGER.addFilter(InTerms())
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


_install()


def is_main_process() -> bool:
    """Whether this process says the listing: accelerate's ``RANK`` unset (a single process), empty or 0."""
    return os.environ.get("RANK", "0") in ("", "0")


def say(message: str) -> None:
    """One line of the listing, said by the main process."""
    if is_main_process():
        LOGGER.info("%s", message)


@contextlib.contextmanager
def rewritten(rewrite: Callable[[str], str]) -> Iterator[None]:
    """The listing's lines said inside put through ``rewrite`` (a data set's terms), in this context only."""
    token = _REWRITE.set(rewrite)
    try:
        yield
    finally:
        _REWRITE.reset(token)
