"""The dit family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The :class:`~.spec.DiTFamily` (``name`` is ``"dit"``)."""
    from dit_lora.families.dit.spec import DiTFamily

    return DiTFamily()


ENTRY = FamilyEntry(
    names=("dit",), factory=f"{__name__}:make", options=f"{__name__}.options:DiTOptions",
    catalogue=f"{__name__}.catalogue",
    demo_configs=("dit_class/demo.yaml",),
    recipe="dit_class_lora.py",  # recipes/dit_lora.py would shadow the dit_lora package
    docs="docs/guides/dit.md",
)
