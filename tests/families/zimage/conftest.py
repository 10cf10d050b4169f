"""Shared fixtures of the Z-Image unit tests: the tiny pipeline's components, built once per module."""

from __future__ import annotations

import pytest
from zimage_layout import tiny_components


@pytest.fixture(scope="module")
def tiny():
    """The tiny ZImagePipeline components (fp32, eval): transformer, text_encoder, tokenizer, vae, scheduler."""
    return tiny_components(seed=0)
