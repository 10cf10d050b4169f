"""The wan family: Wan 2.1 and 2.2 LoRA (text-to-video and image-to-video); everything about it lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    names=("wan", "wan_i2v"),
    options={"wan": "WanOptions", "wan_i2v": "WanI2VOptions"},
    pipelines={"wan": ("WanPipeline",), "wan_i2v": ("WanImageToVideoPipeline",)},
    demo_configs=("wan/demo.yaml", "wan/i2v_demo.yaml"),
)
