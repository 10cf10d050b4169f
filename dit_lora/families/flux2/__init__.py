"""The FLUX.2 family (FLUX.2 [dev] and klein): everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry

# "module:attr" strings: the registry imports this package for ENTRY alone, and the spec's modules load torch
ENTRY = FamilyEntry.in_package(
    __name__,
    names=("flux2",),
    aliases=("flux.2",),
    spec="flux2_spec",
    options="Flux2Options",
    pipelines=("Flux2Pipeline", "Flux2KleinPipeline"),
)
