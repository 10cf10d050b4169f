"""The FLUX.2 family (FLUX.2 [dev] and klein): everything about this model lives in this folder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.flux2.options import Flux2Options
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.flux2.spec import flux2_spec

    return flux2_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    aliases=("flux.2",),
    options=Flux2Options,
    pipelines=("Flux2Pipeline", "Flux2KleinPipeline"),
)
