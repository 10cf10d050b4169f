"""FLUX.1 [dev] (diffusers ``FluxTransformer2DModel`` / ``FluxPipeline``): its
:class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, [schnell] refused, loading, precision,
buckets, demo), ``encoders.py`` (the FLUX VAE's shifted and scaled latents, T5's hidden states and CLIP's pooled
output through the pipeline's own ``encode_prompt``), ``loss.py`` (rectified flow with the dynamic shift and the
guidance embedding fed a fixed value), ``samples.py``, ``plan.py``, ``adapter.py`` (the model card); what a run
decides is its ``FluxRun`` (``state.py``). Precision: transformer, CLIP and T5 in bf16, the VAE in fp32. Fused
kernels: no block of its own is patched; the generic points patch its q/k ``RMSNorm``s and ``LayerNorm``s.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.diffusion.adapter import KitAdapter
from dit_lora.families.diffusion.builder import diffusion_spec
from dit_lora.families.diffusion.packed import BUCKETS, LORA_LAYERS
from dit_lora.families.diffusion.text_conditioned import TextSettingsSetup
from dit_lora.families.flux.adapter import FluxCard
from dit_lora.families.flux.encoders import FluxEncoders
from dit_lora.families.flux.loss import FluxLoss
from dit_lora.families.flux.model import DEMO, PARTS, FluxModel
from dit_lora.families.flux.plan import FluxPlan
from dit_lora.families.flux.samples import FluxSamples
from dit_lora.families.flux.state import run_state

#: what the model card, the loader and the levers say about FLUX.1
INFO = FamilyInfo(
    pipeline_class_name="FluxPipeline",
    card_tags=("text-to-image", "diffusers", "flux", "diffusers-training"),
    default_lora_layers=LORA_LAYERS,  # diffusers' train_dreambooth_lora_flux.py default
    text_encoder_label="CLIP-L / T5-XXL",
    # at 1024 px the 12B model's step holds 46.9 GiB without it and 24.7 GiB with it (`dit-lora plan`): on by
    # default, as for Z-Image, so a 48 GB card fits the catalogue's defaults
    gradient_checkpointing_default=True,
    block_lists=("transformer_blocks", "single_transformer_blocks"),
)


def flux_spec(name: str = "flux") -> FamilySpec:
    """A new FLUX.1 spec: FLUX.1 [dev] (and the tiny random variant of the tests)."""
    encoders = FluxEncoders()
    return diffusion_spec(
        name,
        INFO,
        model=FluxModel(INFO, PARTS),
        encoders=encoders,
        loss=FluxLoss,
        samples=FluxSamples,
        plan=FluxPlan,
        adapter=KitAdapter(INFO),
        image_buckets=BUCKETS,
        card=FluxCard(INFO),
        setup=TextSettingsSetup(encoders, run_state),
        # no defaults: the transformer config carries no trained size (the catalogue's entry does)
        demo=DEMO,
    )
