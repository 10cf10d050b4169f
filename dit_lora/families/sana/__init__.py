"""The sana family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """Sana's :class:`~dit_lora.contract.spec.FamilySpec` (``name`` is ``"sana"``)."""
    # here, not at the top: the registry imports this package for ENTRY, and the spec's modules load torch
    from dit_lora.families.sana.spec import sana_spec

    return sana_spec()


ENTRY = FamilyEntry(
    names=("sana",),
    factory=f"{__name__}:make",
    options=f"{__name__}.options:SanaOptions",
    catalogue=f"{__name__}.catalogue",
    demo_configs=("sana/demo.yaml",),
    recipe="sana_lora.py",
    docs="docs/guides/sana.md",
    pipelines=("SanaPipeline",),
)
