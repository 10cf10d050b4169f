"""Shared fixtures of the SANA-Video unit tests: the tiny pipeline's components, built once per module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny():
    """The tiny SanaVideoPipeline components (fp32, eval): transformer, vae, text_encoder, tokenizer, scheduler."""
    from dit_lora.families.sanavideo.demo import build_tiny_sanavideo_components

    return build_tiny_sanavideo_components("t2v", seed=0)
