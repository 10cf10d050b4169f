"""The cogvideox family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The family of ``name``: ``cogvideox`` (text-to-video) or ``cogvideox_i2v`` (image-to-video)."""
    if name == "cogvideox_i2v":
        from dit_lora.families.cogvideox.i2v import CogVideoXI2VFamily

        return CogVideoXI2VFamily()
    from dit_lora.families.cogvideox.spec import CogVideoXFamily

    return CogVideoXFamily()


ENTRY = FamilyEntry(
    names=("cogvideox", "cogvideox_i2v"), factory=f"{__name__}:make", catalogue=f"{__name__}.catalogue",
    options={"cogvideox": f"{__name__}.options:CogVideoXOptions",
             "cogvideox_i2v": f"{__name__}.options:CogVideoXI2VOptions"},
    demo_configs=("cogvideox/demo.yaml", "cogvideox/i2v_demo.yaml"), recipe="cogvideox_lora.py",
    docs="docs/guides/cogvideox.md",
)
