"""The cogvideox family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The :class:`~dit_lora.contract.spec.FamilySpec` of ``name``: ``cogvideox`` (text-to-video) or
    ``cogvideox_i2v`` (image-to-video)."""
    # The registry imports this package for ENTRY alone; the spec's modules load torch
    from dit_lora.families.cogvideox.spec import cogvideox_spec

    return cogvideox_spec(name)


ENTRY = FamilyEntry(
    names=("cogvideox", "cogvideox_i2v"),
    factory=f"{__name__}:make",
    catalogue=f"{__name__}.catalogue",
    options={
        "cogvideox": f"{__name__}.options:CogVideoXOptions",
        "cogvideox_i2v": f"{__name__}.options:CogVideoXI2VOptions",
    },
    demo_configs=("cogvideox/demo.yaml", "cogvideox/i2v_demo.yaml"),
    recipe="cogvideox_lora.py",
    docs="docs/guides/cogvideox.md",
    pipelines={
        "cogvideox": ("CogVideoXPipeline",),
        "cogvideox_i2v": ("CogVideoXImageToVideoPipeline",),
    },
)
