"""The dit family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """DiT's :class:`~dit_lora.contract.spec.FamilySpec` (``name`` is ``"dit"``)."""
    # The registry imports a family's package for its ENTRY alone; the spec's modules load torch
    from dit_lora.families.dit.spec import dit_spec

    return dit_spec()


ENTRY = FamilyEntry(
    names=("dit",),
    factory=f"{__name__}:make",
    options=f"{__name__}.options:DiTOptions",
    catalogue=f"{__name__}.catalogue",
    demo_configs=("dit_class/demo.yaml",),
    recipe="dit_class_lora.py",  # recipes/dit_lora.py would shadow the dit_lora package
    docs="docs/guides/dit.md",
    pipelines=("DiTPipeline",),
)
