"""Lumina 2 (diffusers ``Lumina2Transformer2DModel`` / ``Lumina2Pipeline``; Alpha-VLLM's Lumina-Image 2.0, a 2.6B
Unified Next-DiT, Apache-2.0): its :class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading, precision, buckets, demo),
``encoders.py`` (the FLUX.1 VAE's shifted and scaled latents, Gemma-2's second-to-last hidden state after the system
prompt, with its mask, the run's text settings), ``loss.py`` (the kit's masked-caption flow in Lumina 2's reversed
time), ``samples.py``, ``plan.py``, ``adapter.py`` (the model card), ``comfyui.py`` (ComfyUI's own names); what a run
decides is its ``Lumina2Run`` (``state.py``). Precision: transformer and Gemma-2 in bf16, the VAE in fp32. Fused
kernels: no block of its own is patched (its attention runs its own processor with RoPE and grouped-query heads, its
modulation is inline in its block); the generic points patch its diffusers ``RMSNorm``s.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.lumina2.adapter import LUMINA2_VAE, Lumina2Card
from dit_lora.families.lumina2.comfyui import EXPORT
from dit_lora.families.lumina2.encoders import Lumina2Encoders, max_sequence_length
from dit_lora.families.lumina2.loss import Lumina2Loss
from dit_lora.families.lumina2.model import BUCKETS, DEMO, PARTS, Lumina2Model
from dit_lora.families.lumina2.plan import Lumina2Plan
from dit_lora.families.lumina2.samples import Lumina2Samples
from dit_lora.families.lumina2.state import run_state
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.text_conditioned import TextSettingsSetup
from dit_lora.kit.text_padding import TrimmedTextData

#: what the model card, the loader and the levers say about Lumina 2
INFO = FamilyInfo(
    pipeline_class_name="Lumina2Pipeline",
    # diffusers' first name for it (huggingface/diffusers#10642, renamed in #10827): a folder saved then names it
    other_pipeline_classes=("Lumina2Text2ImgPipeline",),
    card_tags=("text-to-image", "diffusers", "lumina2", "diffusers-training"),
    default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),  # diffusers' train_dreambooth_lora_lumina2.py
    text_encoder_label="Gemma-2",
    # at 1024 px the 2.6B model's step without it needs about 20 GiB of activations (`dit-lora plan`: 24.4 GiB peak
    # on 24 GB), with it 2.7 GiB
    gradient_checkpointing_default=True,
    # --compile: the joint blocks' sequence is the batch's longest caption plus the image tokens, a length that
    # changes with the captions (one static graph per length would soon pass dynamo's recompile limit)
    compile_dynamic=True,
    # the refiners run first, on the caption and the image tokens alone, then the joint layers
    block_lists=("context_refiner", "noise_refiner", "layers"),
)


def lumina2_spec(name: str = "lumina2") -> FamilySpec:
    """A new Lumina 2 spec: Lumina-Image 2.0 (and the tiny random variant of the tests), its parts wired by the kit's
    :func:`~dit_lora.kit.builder.diffusion_spec`: the trimmed caption padding, the fp32 VAE of the reload, the
    ComfyUI export, its buckets and the size they default to."""
    encoders = Lumina2Encoders()
    return diffusion_spec(
        name,
        INFO,
        model=Lumina2Model(INFO, PARTS),
        encoders=encoders,
        loss=Lumina2Loss,
        samples=Lumina2Samples,
        plan=Lumina2Plan,
        data=TrimmedTextData(max_sequence_length, run_state, option="trim_text_padding"),
        adapter=KitAdapter(INFO, fp32_vae=LUMINA2_VAE),
        exports=EXPORT,
        image_buckets=BUCKETS,
        card=Lumina2Card(INFO),
        defaults=BUCKETS,
        setup=TextSettingsSetup(encoders, run_state),
        demo=DEMO,
    )
