"""Offline tests: the Hub variables set and every outgoing connection refused, so an accidental Hub lookup errors
instead of passing or hanging (HF_HUB_OFFLINE alone is read by the libraries at import time, maybe earlier)."""

from __future__ import annotations

import socket
from typing import Iterator

import pytest


def no_network() -> Iterator[None]:
    """Generator for a module-scoped autouse fixture: offline while the module's tests run."""
    patch = pytest.MonkeyPatch()
    patch.setenv("HF_HUB_OFFLINE", "1")
    patch.setenv("HF_DATASETS_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise OSError("network access attempted in an offline test")

    patch.setattr(socket.socket, "connect", refuse)
    patch.setattr(socket, "create_connection", refuse)
    yield
    patch.undo()
