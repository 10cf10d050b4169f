"""The Ideogram 4 family (ideogram-ai/ideogram-v4, Ideogram's flow-matching transformer with asymmetric guidance;
``--family ideogram4``, also ``ideogram-4``): everything about this model lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__, aliases=("ideogram-4", "ideogram"), options="Ideogram4Options", pipelines=("Ideogram4Pipeline",)
)
