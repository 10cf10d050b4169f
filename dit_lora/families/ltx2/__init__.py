"""The ltx2 family: LTX-2 LoRA, text-to-video with its sound; everything about it lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    names=("ltx2",),
    aliases=("ltx-2",),
    options={"ltx2": "LTX2Options"},
    pipelines={"ltx2": ("LTX2Pipeline",)},
    demo_configs=("ltx2/demo.yaml",),
    docs="docs/guides/ltx-2.md",
)
