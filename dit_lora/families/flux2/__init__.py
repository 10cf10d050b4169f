"""The FLUX.2 family (FLUX.2 [dev] and klein): everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__, aliases=("flux.2",), options="Flux2Options", pipelines=("Flux2Pipeline", "Flux2KleinPipeline")
)
