"""The Qwen-Image family: everything about Qwen-Image and its Edit models lives in this folder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.qwenimage.options import QwenImageEditOptions, QwenImageOptions
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.qwenimage.spec import qwenimage_spec

    return qwenimage_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    names=("qwenimage", "qwenimage_edit", "qwenimage_edit_plus"),
    aliases=("qwen-image",),
    options={
        "qwenimage": QwenImageOptions,
        "qwenimage_edit": QwenImageEditOptions,
        "qwenimage_edit_plus": QwenImageEditOptions,
    },
    pipelines={
        "qwenimage": ("QwenImagePipeline",),
        "qwenimage_edit": ("QwenImageEditPipeline",),
        "qwenimage_edit_plus": ("QwenImageEditPlusPipeline",),
    },
    demo_configs=("qwenimage/demo.yaml", "qwenimage/edit_demo.yaml"),
)
