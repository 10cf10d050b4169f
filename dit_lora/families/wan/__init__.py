"""The wan family: Wan 2.1 and 2.2 LoRA (text-to-video and image-to-video); everything about it lives here."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The :class:`~dit_lora.contract.spec.FamilySpec` of ``name``: ``wan`` (text-to-video) or ``wan_i2v``
    (image-to-video), a new one per call."""
    # The registry imports the package for ENTRY; the spec's modules load torch
    from dit_lora.families.wan.spec import wan_spec

    return wan_spec(name)


ENTRY = FamilyEntry(
    names=("wan", "wan_i2v"),
    factory=f"{__name__}:make",
    catalogue=f"{__name__}.catalogue",
    options={"wan": f"{__name__}.options:WanOptions", "wan_i2v": f"{__name__}.options:WanI2VOptions"},
    demo_configs=("wan/demo.yaml", "wan/i2v_demo.yaml"),
    recipe="wan_lora.py",
    docs="docs/guides/wan.md",
    pipelines={
        "wan": ("WanPipeline",),
        "wan_i2v": ("WanImageToVideoPipeline",),
    },
)
