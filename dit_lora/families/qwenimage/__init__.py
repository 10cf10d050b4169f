"""The Qwen-Image family: everything about Qwen-Image and its Edit models lives in this folder."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The :class:`~dit_lora.contract.spec.FamilySpec` of ``name``: ``qwenimage`` (QwenImagePipeline),
    ``qwenimage_edit`` (QwenImageEditPipeline) or ``qwenimage_edit_plus`` (QwenImageEditPlusPipeline)."""
    # here, not at the top: the registry imports this package for ENTRY, and the spec's modules load torch
    from dit_lora.families.qwenimage.spec import qwenimage_spec

    return qwenimage_spec(name)


ENTRY = FamilyEntry(
    names=("qwenimage", "qwenimage_edit", "qwenimage_edit_plus"),
    aliases=("qwen-image",),
    factory=f"{__name__}:make",
    options={
        "qwenimage": f"{__name__}.options:QwenImageOptions",
        "qwenimage_edit": f"{__name__}.options:QwenImageEditOptions",
        "qwenimage_edit_plus": f"{__name__}.options:QwenImageEditOptions",
    },
    catalogue=f"{__name__}.catalogue",
    demo_configs=("qwenimage/demo.yaml", "qwenimage/edit_demo.yaml"),
    recipe="qwenimage_lora.py",
    docs="docs/guides/qwenimage.md",
    pipelines={
        "qwenimage": ("QwenImagePipeline",),
        "qwenimage_edit": ("QwenImageEditPipeline",),
        "qwenimage_edit_plus": ("QwenImageEditPlusPipeline",),
    },
)
