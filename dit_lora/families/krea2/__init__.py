"""The Krea 2 family (krea/Krea-2-Raw, Krea AI's 12.9B single-stream MMDiT; ``--family krea2``, also ``krea-2``):
everything about this model lives here."""

from dit_lora.registry import FamilyEntry

# "module:attr" strings: the registry imports this package for ENTRY alone, and the spec's modules load torch
ENTRY = FamilyEntry.in_package(
    __name__,
    names=("krea2",),
    aliases=("krea-2", "krea"),
    spec="krea2_spec",
    options="Krea2Options",
    pipelines=("Krea2Pipeline",),
)
