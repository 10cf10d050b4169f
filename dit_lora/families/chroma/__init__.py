"""The Chroma family (Chroma1-HD and Chroma1-Base, lodestones' FLUX.1 [schnell] derivative): everything about this
model lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(__name__, aliases=("chroma1",), options="ChromaOptions", pipelines=("ChromaPipeline",))
