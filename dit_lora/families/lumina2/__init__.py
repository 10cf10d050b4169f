"""The lumina2 family (Alpha-VLLM's Lumina-Image 2.0; ``--family lumina``/``lumina-2`` are read as ``lumina2``):
everything about this model lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.lumina2.options import Lumina2Options
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.lumina2.spec import lumina2_spec

    return lumina2_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    aliases=("lumina", "lumina-2", "lumina-image-2"),
    options=Lumina2Options,
    pipelines=("Lumina2Pipeline", "Lumina2Text2ImgPipeline"),
)
