"""Qwen-Image (diffusers ``QwenImageTransformer2DModel`` / ``QwenImagePipeline``): its
:class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading, precision, defaults, buckets,
demo), ``encoders.py`` (the VAE and Qwen2.5-VL through the pipeline's own ``encode_prompt``), ``shift.py`` (the
per-resolution shift of the training sigmas), ``loss.py`` (flow matching on the packed latent, the cached caption
length), ``samples.py``, ``plan.py``, ``adapter.py`` (saving, loading back, the model card); what a run decides is its
``QwenImageRun`` (``state.py``) in ``comps.state``. Precision: transformer and Qwen2.5-VL in bf16, the VAE in fp32.
Fused kernels: no block of its own is patched (the double-stream processor and inline modulation are its own
code); the generic points patch its diffusers ``RMSNorm``s and ``nn.LayerNorm``s (``dit_lora/kernels/patch.py``;
``tests/kernels/test_patch_image_families.py``).
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.qwenimage.adapter import QwenImageAdapter, QwenImageCard
from dit_lora.families.qwenimage.comfyui import EXPORTS
from dit_lora.families.qwenimage.edit import EditEncoders, EditLoss, EditSamples, EditSetup
from dit_lora.families.qwenimage.encoders import QwenImageEncoders, QwenImageSetup
from dit_lora.families.qwenimage.loss import QwenImageData, QwenImageLoss
from dit_lora.families.qwenimage.model import (
    BUCKETS,
    PARTS,
    QwenImageDefaults,
    QwenImageDemo,
    QwenImageEditModel,
    QwenImageModel,
)
from dit_lora.families.qwenimage.plan import QwenImagePlan
from dit_lora.families.qwenimage.samples import QwenImageSamples
from dit_lora.kit.builder import diffusion_spec

#: each registry name's pipeline and model-card task (the Edit models: one or more control images per sample)
VARIANTS = {
    "qwenimage": ("t2i", "QwenImagePipeline", "text-to-image"),
    "qwenimage_edit": ("edit", "QwenImageEditPipeline", "image-to-image"),
    "qwenimage_edit_plus": ("edit_plus", "QwenImageEditPlusPipeline", "image-to-image"),
}


def family_info(name: str) -> FamilyInfo:
    """What the model card, the loader, ``--blocks_to_swap``/FSDP2 and ``--compile`` say about ``name``."""
    _, pipeline, task = VARIANTS[name]
    return FamilyInfo(
        pipeline_class_name=pipeline,
        card_tags=(task, "diffusers", "qwen-image", "diffusers-training"),
        pipeline_tag=task,
        # diffusers' train_dreambooth_lora_qwen_image.py default targets (the image stream's attention)
        default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
        gradient_checkpointing_default=True,  # a 20B MMDiT: what every reference trainer turns on
        text_encoder_label="Qwen2.5-VL",
        block_lists=("transformer_blocks",),
    )


#: text-to-image Qwen-Image's
INFO = family_info("qwenimage")


def qwenimage_spec(name: str = "qwenimage") -> FamilySpec:
    """A new spec of ``name``: text-to-image Qwen-Image and 2512, Qwen-Image-Edit, Edit-2509/2511 (and the tiny random
    variants of each)."""
    variant = VARIANTS[name][0]
    info = family_info(name)
    edit = None if variant == "t2i" else variant
    encoders: QwenImageEncoders = EditEncoders(plus=edit == "edit_plus") if edit else QwenImageEncoders()
    return diffusion_spec(
        name,
        info,
        model=QwenImageEditModel(info, PARTS) if edit else QwenImageModel(info, PARTS),
        encoders=encoders,
        loss=EditLoss if edit else QwenImageLoss,
        samples=EditSamples if isinstance(encoders, EditEncoders) else QwenImageSamples,
        plan=lambda encoders, loss, buckets: QwenImagePlan(encoders, loss, buckets, edit),
        data=QwenImageData(edit),
        adapter=QwenImageAdapter(info),
        exports=EXPORTS,
        image_buckets=BUCKETS,
        card=QwenImageCard(info),
        defaults=QwenImageDefaults(),
        setup=EditSetup(encoders) if edit else QwenImageSetup(encoders),
        demo=QwenImageDemo(variant),
    )
