"""The FLUX.2 family (FLUX.2 [dev] and klein): everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """FLUX.2's :class:`~dit_lora.contract.spec.FamilySpec` (``name`` is ``"flux2"``)."""
    # here, not at the top: the registry imports this package for ENTRY, and the spec's modules load torch
    from dit_lora.families.flux2.spec import flux2_spec

    return flux2_spec()


ENTRY = FamilyEntry(
    names=("flux2",),
    aliases=("flux.2",),
    factory=f"{__name__}:make",
    options=f"{__name__}.options:Flux2Options",
    catalogue=f"{__name__}.catalogue",
    demo_configs=("flux2/demo.yaml",),
    recipe="flux2_lora.py",
    docs="docs/guides/flux2.md",
    pipelines=("Flux2Pipeline", "Flux2KleinPipeline"),
)
