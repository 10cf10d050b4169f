"""The Ideogram 4 tests' shared tiny pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_ideogram4(tmp_path_factory) -> Path:
    """The demo's tiny Ideogram4Pipeline."""
    from dit_lora.families.ideogram4.demo import build_tiny_ideogram4_pipeline

    return build_tiny_ideogram4_pipeline(tmp_path_factory.mktemp("ideogram4") / "tiny")


@pytest.fixture(scope="module")
def parts() -> dict:
    """The tiny pipeline's components in memory (fp32)."""
    from dit_lora.families.ideogram4.demo import build_tiny_ideogram4_components

    return build_tiny_ideogram4_components()
