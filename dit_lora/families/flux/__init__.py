"""The FLUX.1 family (FLUX.1 [dev]; ``--family flux.1`` is read as ``flux``): everything about this model lives here."""

from dit_lora.registry import FamilyEntry

# "module:attr" strings: the registry imports this package for ENTRY alone, and the spec's modules load torch
ENTRY = FamilyEntry.in_package(
    __name__,
    names=("flux",),
    aliases=("flux.1", "flux1"),
    spec="flux_spec",
    options="FluxOptions",
    pipelines=("FluxPipeline",),
)
