"""The FLUX.1 family (FLUX.1 [dev]; ``--family flux.1`` is read as ``flux``; FLUX.1 Kontext [dev] as
``flux_kontext``): everything about these models lives here."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    names=("flux", "flux_kontext"),
    aliases=("flux.1", "flux1"),
    options={"flux": "FluxOptions", "flux_kontext": "KontextOptions"},
    pipelines={"flux": ("FluxPipeline",), "flux_kontext": ("FluxKontextPipeline",)},
    demo_configs=("flux/demo.yaml", "flux/kontext_demo.yaml"),
)
