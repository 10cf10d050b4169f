"""The sanavideo family: SANA-Video LoRA, text-to-video and image-to-video; everything about it lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    names=("sanavideo", "sanavideo_i2v"),
    aliases=("sana-video",),
    options={"sanavideo": "SanaVideoOptions", "sanavideo_i2v": "SanaVideoI2VOptions"},
    pipelines={"sanavideo": ("SanaVideoPipeline",), "sanavideo_i2v": ("SanaImageToVideoPipeline",)},
    demo_configs=("sanavideo/demo.yaml", "sanavideo/i2v_demo.yaml"),
    docs="docs/guides/sana-video.md",
)
