"""The zimage family (Z-Image and Z-Image-Turbo; ``--family z-image`` is read as ``zimage``): everything about it lives here."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """Z-Image's :class:`~dit_lora.contract.spec.FamilySpec` (``name`` is ``"zimage"``)."""
    # here, not at the top: the registry imports this package for ENTRY, and the spec's modules load torch
    from dit_lora.families.zimage.spec import zimage_spec

    return zimage_spec(name)


ENTRY = FamilyEntry(
    names=("zimage",),
    aliases=("z-image",),
    factory=f"{__name__}:make",
    options=f"{__name__}.options:ZImageOptions",
    catalogue=f"{__name__}.catalogue",
    demo_configs=("zimage/demo.yaml",),
    recipe="zimage_lora.py",
    docs="docs/guides/zimage.md",
    pipelines=("ZImagePipeline",),
)
