"""The lumina2 family (Alpha-VLLM's Lumina-Image 2.0; ``--family lumina``/``lumina-2`` are read as ``lumina2``):
everything about this model lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    aliases=("lumina", "lumina-2", "lumina-image-2"),
    options="Lumina2Options",
    pipelines=("Lumina2Pipeline", "Lumina2Text2ImgPipeline"),
)
