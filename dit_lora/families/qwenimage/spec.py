"""Qwen-Image (diffusers ``QwenImageTransformer2DModel`` / ``QwenImagePipeline``): its
:class:`~dit_lora.contract.spec.FamilySpec`.

The components live beside this file, one module each: ``model.py`` (checks, loading, precision, defaults, buckets,
demo), ``encoders.py`` (the VAE and Qwen2.5-VL through the pipeline's own ``encode_prompt``), ``shift.py`` (the
per-resolution shift of the training sigmas), ``loss.py`` (flow matching on the packed latent, the cached caption
length), ``samples.py``, ``plan.py``, ``adapter.py`` (saving, loading back, the model card); what a run decides is its
``QwenImageRun`` (``state.py``) in ``comps.state``. Precision: transformer and Qwen2.5-VL in bf16, the VAE in fp32.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.diffusion.components import DiffusionCaptions, DiffusionNotes
from dit_lora.families.qwenimage.adapter import QwenImageAdapter, QwenImageCard
from dit_lora.families.qwenimage.encoders import QwenImageEncoders, QwenImageSetup
from dit_lora.families.qwenimage.loss import QwenImageData, QwenImageLoss
from dit_lora.families.qwenimage.model import (
    QwenImageBuckets,
    QwenImageDefaults,
    QwenImageDemo,
    QwenImageModel,
    QwenImagePrecision,
)
from dit_lora.families.qwenimage.plan import QwenImagePlan
from dit_lora.families.qwenimage.samples import QwenImageSamples

#: what the model card, the loader, ``--blocks_to_swap``/FSDP2 and ``--compile`` say about Qwen-Image
INFO = FamilyInfo(
    pipeline_class_name="QwenImagePipeline",
    card_tags=("text-to-image", "diffusers", "qwen-image", "diffusers-training"),
    pipeline_tag="text-to-image",
    # diffusers' train_dreambooth_lora_qwen_image.py default targets (the image stream's attention)
    default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
    gradient_checkpointing_default=True,  # a 20B MMDiT: what every reference trainer turns on
    text_encoder_label="Qwen2.5-VL",
    block_lists=("transformer_blocks",),
)


def qwenimage_spec() -> FamilySpec:
    """A new Qwen-Image spec: text-to-image Qwen-Image and Qwen-Image-2512 (and the tiny random variants)."""
    encoders = QwenImageEncoders()
    loss = QwenImageLoss(encoders)
    buckets = QwenImageBuckets()
    return FamilySpec(
        name="qwenimage",
        info=INFO,
        model=QwenImageModel(INFO),
        data=QwenImageData(),
        loss=loss,
        adapter=QwenImageAdapter(INFO),
        encoders=encoders,
        captions=DiffusionCaptions(),
        image_buckets=buckets,
        samples=QwenImageSamples(encoders),
        plan=QwenImagePlan(encoders, loss, buckets),
        card=QwenImageCard(INFO),
        defaults=QwenImageDefaults(),
        notes=DiffusionNotes(),
        setup=QwenImageSetup(encoders),
        precision=QwenImagePrecision(),
        demo=QwenImageDemo(),
    )
