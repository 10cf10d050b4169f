"""The sana family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The :class:`~.spec.SanaFamily` (``name`` is ``"sana"``)."""
    from dit_lora.families.sana.spec import SanaFamily

    return SanaFamily()


ENTRY = FamilyEntry(
    names=("sana",), factory=f"{__name__}:make", options=f"{__name__}.options:SanaOptions",
    catalogue=f"{__name__}.catalogue",
    demo_configs=("sana/demo.yaml",), recipe="sana_lora.py",
    docs="docs/guides/sana.md",
)
