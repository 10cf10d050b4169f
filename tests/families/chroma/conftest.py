"""The Chroma tests' shared tiny pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_chroma(tmp_path_factory) -> Path:
    """The demo's tiny ChromaPipeline."""
    from dit_lora.families.chroma.demo import build_tiny_chroma_pipeline

    return build_tiny_chroma_pipeline(tmp_path_factory.mktemp("chroma") / "tiny")
