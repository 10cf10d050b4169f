"""The video-LLM architectures dit-lora knows: spec and tiny demo builder per family name.

One line per architecture in :data:`ARCHITECTURES`; the package's registry entry (``ENTRY.names``)
registers a family for every name here. Both halves are imported only when asked for.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

#: family name -> (its VideoLLMSpec class, its tiny offline demo builder), as "module:attribute"
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "llava_next_video": ("dit_lora.families.videollm.llava_next_video:LlavaNextVideoSpec",
                         "dit_lora.families.videollm.demo_llava:build_tiny_llava_next_video"),
    "qwen2_5_vl": ("dit_lora.families.videollm.qwen2_5_vl:Qwen25VLSpec", "dit_lora.families.videollm.demo_qwen:build_tiny_qwen2_5_vl"),
}


def names() -> list[str]:
    """Every video-LLM family name, in table order."""
    return list(ARCHITECTURES)


def _load(name: str, part: int) -> Any:
    if name not in ARCHITECTURES:
        raise KeyError(f"unknown video-LLM family {name!r}; known: {', '.join(ARCHITECTURES)}")
    module, _, attr = ARCHITECTURES[name][part].partition(":")
    return getattr(importlib.import_module(module), attr)


def spec_for(name: str):
    """The :class:`~dit_lora.families.videollm.architecture.VideoLLMSpec` of family ``name`` (an unknown name: KeyError naming the known)."""
    return _load(name, 0)()


def build_demo_model(name: str, path: str | Path) -> Path:
    """Build (or reuse) the tiny offline model of family ``name`` at ``path`` (an unknown name: KeyError)."""
    return _load(name, 1)(path)
