"""The video-LLM architectures dit-lora knows: spec and tiny demo builder per family name."""

from __future__ import annotations

from pathlib import Path


def spec_for(name: str):
    """The :class:`~dit_lora.vlm.specs.VideoLLMSpec` of family ``name``."""
    if name == "llava_next_video":
        from .llava_next_video import LlavaNextVideoSpec

        return LlavaNextVideoSpec()
    if name == "qwen2_5_vl":
        from .qwen2_5_vl import Qwen25VLSpec

        return Qwen25VLSpec()
    raise KeyError(name)


def build_demo_model(name: str, path: str | Path) -> Path:
    """Build (or reuse) the tiny offline model of family ``name`` at ``path``."""
    if name == "llava_next_video":
        from ..demo.tiny_videochat import build_tiny_llava_next_video

        return build_tiny_llava_next_video(path)
    from ..demo.tiny_qwen_vl import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(path)
