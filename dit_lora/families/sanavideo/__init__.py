"""The sanavideo family: SANA-Video LoRA, text-to-video and image-to-video; everything about it lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.sanavideo.options import SanaVideoI2VOptions, SanaVideoOptions
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.sanavideo.spec import sanavideo_spec

    return sanavideo_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    names=("sanavideo", "sanavideo_i2v"),
    aliases=("sana-video",),
    options={"sanavideo": SanaVideoOptions, "sanavideo_i2v": SanaVideoI2VOptions},
    pipelines={"sanavideo": ("SanaVideoPipeline",), "sanavideo_i2v": ("SanaImageToVideoPipeline",)},
    demo_configs=("sanavideo/demo.yaml", "sanavideo/i2v_demo.yaml"),
    docs="docs/guides/sana-video.md",
)
