"""FLUX.2 (diffusers ``Flux2Transformer2DModel``; ``Flux2Pipeline`` for FLUX.2 [dev], ``Flux2KleinPipeline`` for the
klein models): its :class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (which pipeline the folder is, checks, loading,
precision, buckets, demo), ``encoders.py`` (the VAE's normalised patchified latents, the stacked text-encoder
layers), ``loss.py`` (rectified flow with the dynamic shift and dev's guidance embedding), ``samples.py``, ``plan.py``,
``adapter.py`` (saving, loading back, the model card), ``comfyui.py`` (the ComfyUI-named export); what a run decides is its ``Flux2Run`` (``state.py``).
Precision: transformer and text encoder in bf16, the VAE in fp32. Fused kernels: no block of its own is patched
(``Flux2Modulation`` and the parallel single-stream attention are its own code); the generic points patch its q/k
``torch.nn.RMSNorm``s and ``nn.LayerNorm``s (``dit_lora/kernels/patch.py``; ``tests/kernels/test_patch_image_families.py``).
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.flux2.adapter import Flux2Adapter, Flux2Card
from dit_lora.families.flux2.comfyui import EXPORT
from dit_lora.families.flux2.encoders import Flux2Encoders
from dit_lora.families.flux2.loss import Flux2Loss
from dit_lora.families.flux2.model import BUCKETS, DEMO, PARTS, Flux2Model, Flux2Notes
from dit_lora.families.flux2.plan import Flux2Plan
from dit_lora.families.flux2.samples import Flux2Samples
from dit_lora.families.flux2.state import DEV_PIPELINE, KLEIN_PIPELINE, run_state
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.text_conditioned import TextSettingsSetup

#: what the model card, the loader and the levers say about FLUX.2
INFO = FamilyInfo(
    pipeline_class_name=DEV_PIPELINE,
    other_pipeline_classes=(KLEIN_PIPELINE,),
    card_tags=("text-to-image", "diffusers", "flux2", "diffusers-training"),
    # diffusers' train_dreambooth_lora_flux2.py default, besides each single block's attn.to_out (lora_targets)
    default_lora_layers=("to_q", "to_k", "to_v", "to_out.0", "to_qkv_mlp_proj"),
    text_encoder_label="Mistral-3 / Qwen3",
    block_lists=("transformer_blocks", "single_transformer_blocks"),
)


def flux2_spec(name: str = "flux2") -> FamilySpec:
    """A new FLUX.2 spec: FLUX.2 [dev] and the klein models (and the tiny random variants of the tests), its parts
    wired by the kit's :func:`~dit_lora.kit.builder.diffusion_spec`: its adapter (the ComfyUI export beside
    diffusers'), buckets and notes. No defaults: the transformer config carries no trained size (the catalogue's
    entries do)."""
    encoders = Flux2Encoders()
    return diffusion_spec(
        name,
        INFO,
        model=Flux2Model(INFO, PARTS),
        encoders=encoders,
        loss=Flux2Loss,
        samples=Flux2Samples,
        plan=Flux2Plan,
        adapter=Flux2Adapter(INFO),
        image_buckets=BUCKETS,
        exports=EXPORT,
        card=Flux2Card(INFO),
        notes=Flux2Notes(),
        setup=TextSettingsSetup(encoders, run_state),
        demo=DEMO,
    )
