"""The Ideogram 4 family (ideogram-ai/ideogram-v4, Ideogram's flow-matching transformer with asymmetric guidance;
``--family ideogram4``, also ``ideogram-4``): everything about this model lives here."""

from dit_lora.registry import FamilyEntry

# "module:attr" strings: the registry imports this package for ENTRY alone, and the spec's modules load torch
ENTRY = FamilyEntry.in_package(
    __name__,
    names=("ideogram4",),
    aliases=("ideogram-4", "ideogram"),
    spec="ideogram4_spec",
    options="Ideogram4Options",
    pipelines=("Ideogram4Pipeline",),
)
