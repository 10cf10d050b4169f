"""The FLUX.1 family (FLUX.1 [dev]; ``--family flux.1`` is read as ``flux``; FLUX.1 Kontext [dev] as
``flux_kontext``): everything about these models lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.flux.options import FluxOptions, KontextOptions
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.flux.spec import flux_spec

    return flux_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    names=("flux", "flux_kontext"),
    aliases=("flux.1", "flux1"),
    options={"flux": FluxOptions, "flux_kontext": KontextOptions},
    pipelines={"flux": ("FluxPipeline",), "flux_kontext": ("FluxKontextPipeline",)},
    demo_configs=("flux/demo.yaml", "flux/kontext_demo.yaml"),
)
