"""The zimage family (Z-Image and Z-Image-Turbo; ``--family z-image`` is read as ``zimage``): everything about it lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.zimage.options import ZImageOptions
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.zimage.spec import zimage_spec

    return zimage_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__, factory=build_spec, aliases=("z-image",), options=ZImageOptions, pipelines=("ZImagePipeline",)
)
