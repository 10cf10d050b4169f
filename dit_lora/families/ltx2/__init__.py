"""The ltx2 family: LTX-2 LoRA, text-to-video, image-to-video and in-context (IC-LoRA) with their sound; everything about
it lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    names=("ltx2", "ltx2_i2v", "ltx2_ic"),
    aliases=("ltx-2",),
    options={"ltx2": "LTX2Options", "ltx2_i2v": "LTX2I2VOptions", "ltx2_ic": "LTX2ICOptions"},
    pipelines={
        "ltx2": ("LTX2Pipeline",),
        "ltx2_i2v": ("LTX2ImageToVideoPipeline",),
        "ltx2_ic": ("LTX2InContextPipeline",),
    },
    demo_configs=("ltx2/demo.yaml", "ltx2/i2v_demo.yaml", "ltx2/ic_demo.yaml"),
    docs="docs/guides/ltx-2.md",
)
