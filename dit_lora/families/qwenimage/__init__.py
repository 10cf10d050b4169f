"""The Qwen-Image family: everything about Qwen-Image and its Edit models lives in this folder."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    names=("qwenimage", "qwenimage_edit", "qwenimage_edit_plus"),
    aliases=("qwen-image",),
    options={
        "qwenimage": "QwenImageOptions",
        "qwenimage_edit": "QwenImageEditOptions",
        "qwenimage_edit_plus": "QwenImageEditOptions",
    },
    pipelines={
        "qwenimage": ("QwenImagePipeline",),
        "qwenimage_edit": ("QwenImageEditPipeline",),
        "qwenimage_edit_plus": ("QwenImageEditPlusPipeline",),
    },
    demo_configs=("qwenimage/demo.yaml", "qwenimage/edit_demo.yaml"),
)
