"""The lumina2 family (Alpha-VLLM's Lumina-Image 2.0; ``--family lumina``/``lumina-2`` are read as ``lumina2``):
everything about this model lives here."""

from dit_lora.registry import FamilyEntry

# "module:attr" strings: the registry imports this package for ENTRY alone, and the spec's modules load torch
ENTRY = FamilyEntry.in_package(
    __name__,
    names=("lumina2",),
    aliases=("lumina", "lumina-2", "lumina-image-2"),
    spec="lumina2_spec",
    options="Lumina2Options",
    pipelines=("Lumina2Pipeline", "Lumina2Text2ImgPipeline"),
)
