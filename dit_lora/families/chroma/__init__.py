"""The Chroma family (Chroma1-HD and Chroma1-Base, lodestones' FLUX.1 [schnell] derivative): everything about this
model lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.chroma.options import ChromaOptions
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.chroma.spec import chroma_spec

    return chroma_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__, factory=build_spec, aliases=("chroma1",), options=ChromaOptions, pipelines=("ChromaPipeline",)
)
