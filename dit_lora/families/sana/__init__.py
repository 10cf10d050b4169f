"""The sana family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry

# "module:attr" strings: the registry imports this package for ENTRY alone, and the spec's modules load torch
ENTRY = FamilyEntry.in_package(
    __name__,
    names=("sana",),
    spec="sana_spec",
    options="SanaOptions",
    pipelines=("SanaPipeline",),
)
