"""The wan family: Wan 2.1 and 2.2 LoRA (text-to-video and image-to-video); everything about it lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.wan.options import WanI2VOptions, WanOptions
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.wan.spec import wan_spec

    return wan_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    names=("wan", "wan_i2v"),
    options={"wan": WanOptions, "wan_i2v": WanI2VOptions},
    pipelines={"wan": ("WanPipeline",), "wan_i2v": ("WanImageToVideoPipeline",)},
    demo_configs=("wan/demo.yaml", "wan/i2v_demo.yaml"),
)
