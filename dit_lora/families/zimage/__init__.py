"""The zimage family (Z-Image and Z-Image-Turbo; ``--family z-image`` is read as ``zimage``): everything about it lives here."""

from dit_lora.registry import FamilyEntry

# "module:attr" strings: the registry imports this package for ENTRY alone, and the spec's modules load torch
ENTRY = FamilyEntry.in_package(
    __name__,
    names=("zimage",),
    aliases=("z-image",),
    spec="zimage_spec",
    options="ZImageOptions",
    pipelines=("ZImagePipeline",),
)
