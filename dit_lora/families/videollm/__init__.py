"""Video-language models: VideoChat-style question answering data, prompts and one family spec per architecture.

Each family name trains one architecture: :data:`MODEL_CLASSES` names the transformers class each trains (read
without building a spec: ``--help``, family inference), in the order the names are registered (LLaVA-NeXT-Video
first: the recipe's default); :data:`~.spec.ARCHITECTURES` holds each name's architecture class and tiny demo
builder, and :func:`build_spec` builds the :class:`~dit_lora.contract.spec.FamilySpec` of a name. Adding an
architecture reads as: its module, one line in each of the two tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.videollm.options import VideoChatOptions
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec

#: family name -> the transformers class it trains (a folder's ``architectures``), in registration order
MODEL_CLASSES = {
    "llava_next_video": "LlavaNextVideoForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "internvl": "InternVLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
}


def build_spec(name: str) -> FamilySpec:
    """The :class:`~dit_lora.contract.spec.FamilySpec` of the video-LLM architecture ``name`` (its ``spec.py`` is
    imported here, when a name is first built: the architectures' modules load torch)."""
    from dit_lora.families.videollm.spec import videollm_spec

    return videollm_spec(name)


ENTRY = FamilyEntry(
    names=tuple(MODEL_CLASSES),
    factory=build_spec,
    options=VideoChatOptions,
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
    pipelines={name: (model_class,) for name, model_class in MODEL_CLASSES.items()},
)
