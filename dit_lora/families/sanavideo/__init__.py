"""The sanavideo family: SANA-Video LoRA, text-to-video and image-to-video; everything about it lives here."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The :class:`~dit_lora.contract.spec.FamilySpec` of ``name``: ``sanavideo`` (text-to-video) or
    ``sanavideo_i2v`` (image-to-video), a new one per call."""
    # The registry imports the package for ENTRY; the spec's modules load torch
    from dit_lora.families.sanavideo.spec import sanavideo_spec

    return sanavideo_spec(name)


ENTRY = FamilyEntry(
    names=("sanavideo", "sanavideo_i2v"),
    factory=f"{__name__}:make",
    catalogue=f"{__name__}.catalogue",
    options={
        "sanavideo": f"{__name__}.options:SanaVideoOptions",
        "sanavideo_i2v": f"{__name__}.options:SanaVideoI2VOptions",
    },
    demo_configs=("sanavideo/demo.yaml", "sanavideo/i2v_demo.yaml"),
    recipe="sanavideo_lora.py",
    docs="docs/guides/sana-video.md",
    aliases=("sana-video",),
    pipelines={
        "sanavideo": ("SanaVideoPipeline",),
        "sanavideo_i2v": ("SanaImageToVideoPipeline",),
    },
)
