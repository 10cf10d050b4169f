"""The Ideogram 4 family (ideogram-ai/ideogram-v4, Ideogram's flow-matching transformer with asymmetric guidance;
``--family ideogram4``, also ``ideogram-4``): everything about this model lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.ideogram4.options import Ideogram4Options
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.ideogram4.spec import ideogram4_spec

    return ideogram4_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    aliases=("ideogram-4", "ideogram"),
    options=Ideogram4Options,
    pipelines=("Ideogram4Pipeline",),
)
