"""The ltx2 family: LTX-2 LoRA, text-to-video, image-to-video and in-context (IC-LoRA) with their sound; everything about
it lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.ltx2.options import LTX2I2VOptions, LTX2ICOptions, LTX2Options
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.ltx2.spec import ltx2_spec

    return ltx2_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    names=("ltx2", "ltx2_i2v", "ltx2_ic"),
    aliases=("ltx-2",),
    options={"ltx2": LTX2Options, "ltx2_i2v": LTX2I2VOptions, "ltx2_ic": LTX2ICOptions},
    pipelines={
        "ltx2": ("LTX2Pipeline",),
        "ltx2_i2v": ("LTX2ImageToVideoPipeline",),
        "ltx2_ic": ("LTX2InContextPipeline",),
    },
    demo_configs=("ltx2/demo.yaml", "ltx2/i2v_demo.yaml", "ltx2/ic_demo.yaml"),
    docs="docs/guides/ltx-2.md",
)
