"""The sana family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(__name__, options="SanaOptions", pipelines=("SanaPipeline",))
