"""The tiny LLaVA-NeXT-Video the video-LLM tests share (built offline once per module that asks for it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dit_lora.families.videollm.llava_next_video import LlavaNextVideoSpec

SPEC = LlavaNextVideoSpec()


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    from dit_lora.families.videollm.demo_llava import build_tiny_llava_next_video

    return build_tiny_llava_next_video(tmp_path_factory.mktemp("vlm") / "tiny-llava-next-video", seed=0)


@pytest.fixture(scope="module")
def model(tiny_path):
    return SPEC.load_model(tiny_path, torch.float32)


@pytest.fixture(scope="module")
def tokenizer(tiny_path):
    return SPEC.load_tokenizer(tiny_path)
