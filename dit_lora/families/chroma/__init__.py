"""The Chroma family (Chroma1-HD and Chroma1-Base, lodestones' FLUX.1 [schnell] derivative): everything about this
model lives here."""

from dit_lora.registry import FamilyEntry

# "module:attr" strings: the registry imports this package for ENTRY alone, and the spec's modules load torch
ENTRY = FamilyEntry.in_package(
    __name__,
    names=("chroma",),
    aliases=("chroma1",),
    spec="chroma_spec",
    options="ChromaOptions",
    pipelines=("ChromaPipeline",),
)
