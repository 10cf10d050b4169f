"""The tiny Qwen-Image pipeline, built once per test module that asks for it."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny_qwenimage(tmp_path_factory):
    """A tiny random QwenImagePipeline folder (``demo.build_tiny_qwenimage_pipeline``)."""
    from dit_lora.families.qwenimage.demo import build_tiny_qwenimage_pipeline

    return build_tiny_qwenimage_pipeline(tmp_path_factory.mktemp("qwenimage") / "tiny")
