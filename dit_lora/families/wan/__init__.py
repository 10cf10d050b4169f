"""The wan family: Wan 2.1 and 2.2 LoRA (text-to-video and image-to-video); everything about it lives here."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The family of ``name``: ``wan`` (text-to-video) or ``wan_i2v`` (image-to-video)."""
    if name == "wan_i2v":
        from dit_lora.families.wan.i2v import WanI2VFamily

        return WanI2VFamily()
    from dit_lora.families.wan.spec import WanFamily

    return WanFamily()


ENTRY = FamilyEntry(
    names=("wan", "wan_i2v"), factory=f"{__name__}:make", catalogue=f"{__name__}.catalogue",
    options={"wan": f"{__name__}.options:WanOptions", "wan_i2v": f"{__name__}.options:WanI2VOptions"},
    demo_configs=("wan/demo.yaml", "wan/i2v_demo.yaml"), recipe="wan_lora.py",
    docs="docs/guides/wan.md",
)
