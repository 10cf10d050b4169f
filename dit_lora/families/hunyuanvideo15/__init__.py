"""The hunyuanvideo15 family: HunyuanVideo 1.5 LoRA, text-to-video and image-to-video; everything about it lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    names=("hunyuanvideo15", "hunyuanvideo15_i2v"),
    aliases=("hunyuanvideo-1.5", "hunyuan-video-1.5"),
    options={"hunyuanvideo15": "HunyuanVideo15Options", "hunyuanvideo15_i2v": "HunyuanVideo15I2VOptions"},
    pipelines={
        "hunyuanvideo15": ("HunyuanVideo15Pipeline",),
        "hunyuanvideo15_i2v": ("HunyuanVideo15ImageToVideoPipeline",),
    },
    demo_configs=("hunyuanvideo15/demo.yaml", "hunyuanvideo15/i2v_demo.yaml"),
    docs="docs/guides/hunyuanvideo-1.5.md",
)
