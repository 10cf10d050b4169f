"""The zimage family (Z-Image and Z-Image-Turbo; ``--family z-image`` is read as ``zimage``): everything about it lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(__name__, aliases=("z-image",), options="ZImageOptions", pipelines=("ZImagePipeline",))
