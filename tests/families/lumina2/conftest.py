"""The Lumina 2 tests' shared tiny pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_lumina2(tmp_path_factory) -> Path:
    """The demo's tiny Lumina2Pipeline."""
    from dit_lora.families.lumina2.demo import build_tiny_lumina2_pipeline

    return build_tiny_lumina2_pipeline(tmp_path_factory.mktemp("lumina2") / "tiny")
