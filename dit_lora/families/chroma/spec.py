"""Chroma (diffusers ``ChromaTransformer2DModel`` / ``ChromaPipeline``; lodestones' Chroma1-HD and Chroma1-Base, an
8.9B FLUX.1 [schnell] derivative, Apache-2.0): its :class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading, precision, buckets, demo),
``encoders.py`` (the FLUX VAE's shifted and scaled latents, T5's hidden states and the boolean caption mask through
the pipeline's own ``encode_prompt``), ``loss.py`` (rectified flow with the pipeline's shift, no guidance embedding,
the mask over caption and image tokens; checkpointing that keeps the mask), ``samples.py``, ``plan.py``,
``adapter.py`` (the model card); what a run decides is its ``ChromaRun`` (``state.py``). Precision: transformer and
T5 in bf16, the VAE in fp32, the modulation network kept out of ``--quantize_base``. Fused kernels: no block of its
own is patched; the generic points patch its q/k ``RMSNorm``s and ``LayerNorm``s.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.chroma.adapter import ChromaCard
from dit_lora.families.chroma.encoders import ChromaEncoders, max_sequence_length
from dit_lora.families.chroma.loss import ChromaLoss
from dit_lora.families.chroma.model import DEMO, PARTS, ChromaModel, ChromaTrainables
from dit_lora.families.chroma.plan import ChromaPlan
from dit_lora.families.chroma.samples import ChromaSamples
from dit_lora.families.chroma.state import run_state
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.packed import BUCKETS, LORA_LAYERS
from dit_lora.kit.text_conditioned import TextSettingsSetup
from dit_lora.kit.text_padding import TrimmedTextData

#: what the model card, the loader and the levers say about Chroma
INFO = FamilyInfo(
    pipeline_class_name="ChromaPipeline",
    card_tags=("text-to-image", "diffusers", "chroma", "diffusers-training"),
    default_lora_layers=LORA_LAYERS,  # diffusers' train_dreambooth_lora_flux.py default
    text_encoder_label="T5-XXL",
    # the 8.9B model's step at 1024 px is FLUX.1's size: on by default, as for FLUX.1
    gradient_checkpointing_default=True,
    block_lists=("transformer_blocks", "single_transformer_blocks"),
    # ComfyUI maps every diffusers name (tests/families/chroma/test_comfyui_loader.py)
    loads_as_is=("comfyui",),
)


def chroma_spec(name: str = "chroma") -> FamilySpec:
    """A new Chroma spec: Chroma1-HD and Chroma1-Base (and the tiny random variant of the tests), its parts wired by
    the kit's :func:`~dit_lora.kit.builder.diffusion_spec`: the trimmed caption padding, the packed buckets and
    trainables. No defaults: the transformer config carries no trained size (the catalogue's entry does)."""
    encoders = ChromaEncoders()
    return diffusion_spec(
        name,
        INFO,
        model=ChromaModel(INFO, PARTS),
        encoders=encoders,
        loss=ChromaLoss,
        samples=ChromaSamples,
        plan=ChromaPlan,
        data=TrimmedTextData(max_sequence_length, run_state, option="trim_text_padding"),
        image_buckets=BUCKETS,
        card=ChromaCard(INFO),
        setup=TextSettingsSetup(encoders, run_state),
        trainables=ChromaTrainables(),
        demo=DEMO,
    )
