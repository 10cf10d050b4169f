"""The tiny HunyuanVideo 1.5 components the family's tests share (built once per session, in memory)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def hv15_components():
    """The tiny image-to-video pipeline's components (a superset of text-to-video's), fp32."""
    from dit_lora.families.hunyuanvideo15.demo import build_tiny_hunyuanvideo15_components

    return build_tiny_hunyuanvideo15_components("i2v", seed=0)
