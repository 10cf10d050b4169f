"""The Krea 2 family (krea/Krea-2-Raw, Krea AI's 12.9B single-stream MMDiT; ``--family krea2``, also ``krea-2``):
everything about this model lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.krea2.options import Krea2Options
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.krea2.spec import krea2_spec

    return krea2_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__, factory=build_spec, aliases=("krea-2", "krea"), options=Krea2Options, pipelines=("Krea2Pipeline",)
)
