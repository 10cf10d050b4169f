"""The Krea 2 family (krea/Krea-2-Raw, Krea AI's 12.9B single-stream MMDiT; ``--family krea2``, also ``krea-2``):
everything about this model lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__, aliases=("krea-2", "krea"), options="Krea2Options", pipelines=("Krea2Pipeline",)
)
