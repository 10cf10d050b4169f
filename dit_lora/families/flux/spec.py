"""FLUX.1 [dev] and FLUX.1 Kontext [dev] (diffusers ``FluxTransformer2DModel`` / ``FluxPipeline``,
``FluxKontextPipeline``): their :class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, [schnell] refused, loading, precision,
buckets, demo), ``encoders.py`` (the FLUX VAE's shifted and scaled latents, T5's hidden states and CLIP's pooled
output through the pipeline's own ``encode_prompt``), ``loss.py`` (rectified flow with the dynamic shift and the
guidance embedding fed a fixed value), ``samples.py``, ``plan.py``, ``adapter.py`` (the model card), ``edit.py``
(what Kontext changes: the control image in the data, the cache, the step and the samples); what a run decides is
its ``FluxRun`` (``state.py``). Precision: transformer, CLIP and T5 in bf16, the VAE in fp32. Fused
kernels: no block of its own is patched; the generic points patch its q/k ``RMSNorm``s and ``LayerNorm``s.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.flux.adapter import FluxCard
from dit_lora.families.flux.edit import (
    KontextData,
    KontextEncoders,
    KontextLoss,
    KontextModel,
    KontextPlan,
    KontextSamples,
    KontextSetup,
)
from dit_lora.families.flux.encoders import FluxEncoders
from dit_lora.families.flux.loss import FluxLoss
from dit_lora.families.flux.model import DEMO, KONTEXT_DEMO, PARTS, FluxModel
from dit_lora.families.flux.plan import FluxPlan
from dit_lora.families.flux.samples import FluxSamples
from dit_lora.families.flux.state import run_state
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.packed import BUCKETS, LORA_LAYERS
from dit_lora.kit.text_conditioned import TextSettingsSetup

#: each registry name's pipeline and model-card task
VARIANTS = {"flux": ("FluxPipeline", "text-to-image"), "flux_kontext": ("FluxKontextPipeline", "image-to-image")}


def family_info(name: str) -> FamilyInfo:
    """What the model card, the loader and the levers say about ``name``."""
    pipeline, task = VARIANTS[name]
    return FamilyInfo(
        pipeline_class_name=pipeline,
        card_tags=(task, "diffusers", "flux", "diffusers-training"),
        pipeline_tag=task,
        # diffusers' train_dreambooth_lora_flux.py default; its Kontext script adds the single blocks' proj_mlp
        default_lora_layers=(*LORA_LAYERS, "proj_mlp") if name == "flux_kontext" else LORA_LAYERS,
        text_encoder_label="CLIP-L / T5-XXL",
        # at 1024 px the 12B model's step holds 46.9 GiB without it and 24.7 GiB with it (`dit-lora plan`): on by
        # default, as for Z-Image, so a 48 GB card fits the catalogue's defaults
        gradient_checkpointing_default=True,
        block_lists=("transformer_blocks", "single_transformer_blocks"),
        # ComfyUI maps every diffusers name (tests/families/flux/test_comfyui_loader.py)
        loads_as_is=("comfyui",),
    )


#: FLUX.1 [dev]'s
INFO = family_info("flux")


def flux_spec(name: str = "flux") -> FamilySpec:
    """A new spec of ``name``: FLUX.1 [dev], FLUX.1 Kontext [dev] (and the tiny random variants of the tests), its
    parts wired by the kit's :func:`~dit_lora.kit.builder.diffusion_spec`: Kontext's own from ``edit.py``. No
    defaults: the transformer config carries no trained size (the catalogue's entry does)."""
    info = family_info(name)
    if name == "flux_kontext":
        return kontext_spec(name, info)
    encoders = FluxEncoders()
    return diffusion_spec(
        name,
        info,
        model=FluxModel(info, PARTS),
        encoders=encoders,
        loss=FluxLoss,
        samples=FluxSamples,
        plan=FluxPlan,
        image_buckets=BUCKETS,
        card=FluxCard(info),
        setup=TextSettingsSetup(encoders, run_state),
        demo=DEMO,
    )


def kontext_spec(name: str, info: FamilyInfo) -> FamilySpec:
    """FLUX.1 Kontext [dev]'s spec: FLUX.1's card and buckets, the edit parts of ``edit.py`` (the control image in
    the data, the cache, the step, the setup and the samples)."""
    encoders = KontextEncoders()
    return diffusion_spec(
        name,
        info,
        model=KontextModel(info, PARTS),
        encoders=encoders,
        loss=KontextLoss,
        samples=KontextSamples,
        plan=KontextPlan,
        data=KontextData(),
        image_buckets=BUCKETS,
        card=FluxCard(info),
        setup=KontextSetup(encoders, run_state),
        demo=KONTEXT_DEMO,
    )
