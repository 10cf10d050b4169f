"""Fixtures of the kernel tests.

Under Triton's CPU interpreter, training runs take few wide tiles (``triton_launch.wide_tiles``); the
kernel unit tests that check tiling paths ask for the GPU's tiling instead with ``gpu_tiling``.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def gpu_tiling(monkeypatch):
    """The GPU's tiles on the interpreter too: 16-row blocks, partial last blocks, two backward programs per
    sample looping over several row blocks (and their partial sums), 64-token linear-attention blocks."""
    from dit_lora.kernels import triton_launch

    monkeypatch.setattr(triton_launch, "WIDE_INTERPRETER_TILES", False)

