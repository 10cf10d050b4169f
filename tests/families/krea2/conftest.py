"""The Krea 2 tests' shared tiny pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_krea2(tmp_path_factory) -> Path:
    """The demo's tiny Krea2Pipeline."""
    from dit_lora.families.krea2.demo import build_tiny_krea2_pipeline

    return build_tiny_krea2_pipeline(tmp_path_factory.mktemp("krea2") / "tiny")
