"""Video-language models: VideoChat-style question answering data, prompts and one family spec per architecture.

The one registry of video-LLM architectures is :data:`ARCHITECTURES` below: a family name, its architecture class
(``architecture.VideoLLMSpec`` subclass) and its tiny demo builder. ``ENTRY`` registers every name of it (LLaVA-NeXT-
Video first: the recipe's default), and :func:`make` builds the :class:`~dit_lora.contract.spec.FamilySpec` of a name.
Adding an architecture reads as: its module, one line here. Everything is imported on first use.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import NamedTuple

from dit_lora.registry import FamilyEntry, resolve


class Architecture(NamedTuple):
    """One video-LLM architecture, as ``"module:attribute"`` paths (imported when the family is first asked for)."""

    #: its :class:`~dit_lora.families.videollm.architecture.VideoLLMSpec` subclass
    spec: str
    #: ``build(path) -> Path``: its tiny offline model (``--demo``, the tests)
    demo: str
    #: the transformers class it trains (a folder's ``architectures``), read without importing the spec
    model_class: str


#: family name -> its architecture, in the order the family names are registered (the first: the recipe's default)
ARCHITECTURES: dict[str, Architecture] = {
    "llava_next_video": Architecture(
        f"{__name__}.llava_next_video:LlavaNextVideoSpec",
        f"{__name__}.demo_llava:build_tiny_llava_next_video",
        "LlavaNextVideoForConditionalGeneration",
    ),
    "qwen2_5_vl": Architecture(
        f"{__name__}.qwen2_5_vl:Qwen25VLSpec",
        f"{__name__}.demo_qwen:build_tiny_qwen2_5_vl",
        "Qwen2_5_VLForConditionalGeneration",
    ),
    "internvl": Architecture(
        f"{__name__}.internvl:InternVLSpec",
        f"{__name__}.demo_internvl:build_tiny_internvl",
        "InternVLForConditionalGeneration",
    ),
    "qwen3_vl": Architecture(
        f"{__name__}.qwen3_vl:Qwen3VLSpec",
        f"{__name__}.demo_qwen3_vl:build_tiny_qwen3_vl",
        "Qwen3VLForConditionalGeneration",
    ),
    "qwen3_vl_moe": Architecture(
        f"{__name__}.qwen3_vl_moe:Qwen3VLMoeSpec",
        f"{__name__}.demo_qwen3_vl_moe:build_tiny_qwen3_vl_moe",
        "Qwen3VLMoeForConditionalGeneration",
    ),
}


def _architecture(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise KeyError(f"unknown video-LLM family {name!r}; known: {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def architecture_spec(name: str):
    """A new :class:`~dit_lora.families.videollm.architecture.VideoLLMSpec` of family ``name`` (an unknown name:
    KeyError naming the known)."""
    return resolve(_architecture(name).spec)()


def build_demo_model(name: str, path: str | Path) -> Path:
    """Build (or reuse) the tiny offline model of family ``name`` at ``path`` (an unknown name: KeyError, nothing
    built)."""
    return resolve(_architecture(name).demo)(path)


def make(name: str):
    """The :class:`~dit_lora.contract.spec.FamilySpec` of the video-LLM architecture ``name``."""
    # here, not at the top: the registry imports this package for ENTRY, and the spec's modules load torch
    from dit_lora.families.videollm.spec import family_spec

    return family_spec(architecture_spec(name), partial(build_demo_model, name))


ENTRY = FamilyEntry(
    names=tuple(ARCHITECTURES),
    factory=f"{__name__}:make",
    options=f"{__name__}.options:VideoChatOptions",
    catalogue=__name__,
    demo_configs=(
        "videollm/demo.yaml",
        "videollm/internvl_demo.yaml",
        "videollm/qwen3_vl_demo.yaml",
        "videollm/qwen3_vl_moe_demo.yaml",
    ),
    recipe="videollm_lora.py",
    docs="docs/guides/video-llms.md",
    distinct_models=True,  # one architecture a name: a Qwen3-VL folder is no InternVL's
    pipelines={name: (architecture.model_class,) for name, architecture in ARCHITECTURES.items()},
)
