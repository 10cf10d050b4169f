"""Z-Image (diffusers ``ZImageTransformer2DModel`` / ``ZImagePipeline``): its
:class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading, precision, defaults, notes,
buckets, demo), ``encoders.py`` (FLUX.1 VAE and Qwen3, the run's text settings), ``loss.py`` (rectified flow in
Z-Image's time and sign conventions), ``samples.py``, ``plan.py``, ``adapter.py`` (saving, loading back, the model
card), ``comfyui.py`` (ComfyUI's key names); what a run decides is its ``ZImageRun`` (``state.py``). Precision:
transformer and Qwen3 in bf16, the VAE in fp32. Fused kernels: no block of its own is patched (its attention runs its own processor with RoPE, its
modulation is inline in its block); the generic points patch its diffusers ``RMSNorm``s and ``nn.LayerNorm``
(``dit_lora/kernels/patch.py``; ``tests/kernels/test_patch_image_families.py``).
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.zimage.adapter import ZIMAGE_VAE, ZImageCard
from dit_lora.families.zimage.comfyui import EXPORTS
from dit_lora.families.zimage.encoders import ZImageEncoders
from dit_lora.families.zimage.loss import ZImageLoss
from dit_lora.families.zimage.model import DEMO, PARTS, ZImageBuckets, ZImageDefaults, ZImageModel, ZImageNotes
from dit_lora.families.zimage.plan import ZImagePlan
from dit_lora.families.zimage.samples import ZImageSamples
from dit_lora.families.zimage.state import run_state
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.text_conditioned import TextSettingsSetup

#: what the model card, the loader, --blocks_to_swap and FSDP2 say about Z-Image
INFO = FamilyInfo(
    pipeline_class_name="ZImagePipeline",
    card_tags=("text-to-image", "diffusers", "z-image", "diffusers-training"),
    pipeline_tag="text-to-image",
    default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
    text_encoder_label="Qwen3",
    # diffusers' README_z_image.md trains with --gradient_checkpointing: at 1024 px the 6B model's activations
    # without it exceed an 80 GB GPU (`dit-lora plan`)
    gradient_checkpointing_default=True,
    # The 30 main layers hold 30/34 of the blocks; the two refiner stacks (2 + 2 blocks, run once each before the
    # main layers, on the image and caption tokens alone) stay resident: swapping them saves little and they run
    # on shorter sequences.
    block_lists=("layers",),
    # --compile: the blocks' sequence holds each caption padded to a multiple of 32 tokens, a length that changes
    # with the captions (static shapes compiled again for every new length: 9 graphs for 4 lengths, and up to 16
    # lengths a bucket would pass dynamo's recompile limit)
    compile_dynamic=True,
)


def zimage_spec(name: str = "zimage") -> FamilySpec:
    """A new Z-Image spec: Turbo and base, and the tiny random variants of the tests, its parts wired by the kit's
    :func:`~dit_lora.kit.builder.diffusion_spec`: the fp32 VAE of the reload, the ComfyUI export (also a LoKr/LoHa
    run's), its buckets, defaults and notes."""
    encoders = ZImageEncoders()
    return diffusion_spec(
        name,
        INFO,
        model=ZImageModel(INFO, PARTS),
        encoders=encoders,
        loss=ZImageLoss,
        samples=ZImageSamples,
        plan=ZImagePlan,
        adapter=KitAdapter(INFO, fp32_vae=ZIMAGE_VAE),
        exports=EXPORTS,
        image_buckets=ZImageBuckets(),
        card=ZImageCard(INFO),
        defaults=ZImageDefaults(),
        notes=ZImageNotes(),
        setup=TextSettingsSetup(encoders, run_state),
        demo=DEMO,
    )
