"""HunyuanVideo 1.5 text-to-video (``hunyuanvideo15``, ``HunyuanVideo15Pipeline``) and image-to-video
(``hunyuanvideo15_i2v``, ``HunyuanVideo15ImageToVideoPipeline``): their :class:`~dit_lora.contract.spec.FamilySpec`.

Components, one module each: ``info.py`` (the configs read once, the task, the clip buckets), ``model.py`` (checks,
loading, notes, defaults, demo), ``encoders.py`` (VAE latents, Qwen2.5-VL and ByT5 captions, SigLIP tokens, setup),
``loss.py`` (rectified flow over the 65-channel input), ``samples.py`` (videos), ``plan.py``, ``adapter.py`` (the
card; the adapter file and reloading are the kit's), ``comfyui.py`` (ComfyUI's own names). What a run decides is its ``HunyuanVideo15Run`` (``state.py``).
Precision: the transformer and both text encoders in the run's dtype (bf16 by default), the VAE and SigLIP in fp32,
LoRA fp32. Fused kernels: no block point of its own (its joint attention builds a per-sample square mask from the
reordered caption tokens, its modulation is inline); the generic points patch its LayerNorms and RMSNorms.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.hunyuanvideo15.adapter import HUNYUANVIDEO15_VAE, HunyuanVideo15Adapter, HunyuanVideo15Card
from dit_lora.families.hunyuanvideo15.comfyui import EXPORT
from dit_lora.families.hunyuanvideo15.encoders import HunyuanVideo15Encoders, HunyuanVideo15Setup
from dit_lora.families.hunyuanvideo15.info import I2V_PIPELINE, T2V_PIPELINE, HunyuanVideo15Task
from dit_lora.families.hunyuanvideo15.loss import HunyuanVideo15Loss
from dit_lora.families.hunyuanvideo15.model import (
    DEFAULTS,
    HunyuanVideo15Demo,
    HunyuanVideo15Model,
    HunyuanVideo15Notes,
)
from dit_lora.families.hunyuanvideo15.plan import HunyuanVideo15Plan
from dit_lora.families.hunyuanvideo15.samples import HunyuanVideo15Samples
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.video_sizes import ClipData

TASKS = {
    "hunyuanvideo15": HunyuanVideo15Task(name="hunyuanvideo15", task="t2v", pipeline_class_name=T2V_PIPELINE),
    "hunyuanvideo15_i2v": HunyuanVideo15Task(name="hunyuanvideo15_i2v", task="i2v", pipeline_class_name=I2V_PIPELINE),
}


def hunyuanvideo15_info(task: HunyuanVideo15Task) -> FamilyInfo:
    """What the model card, the loader and ``--compile`` say about the family of ``task``."""
    return FamilyInfo(
        pipeline_class_name=task.pipeline_class_name,
        card_tags=(
            "text-to-video" if task.task == "t2v" else "image-to-video",
            "diffusers",
            "hunyuanvideo-1.5",
            "diffusers-training",
        ),
        # the joint attention's projections of both streams, as musubi-tuner's and diffusion-pipe's HunyuanVideo LoRAs
        default_lora_layers=(
            "to_q",
            "to_k",
            "to_v",
            "to_out.0",
            "add_q_proj",
            "add_k_proj",
            "add_v_proj",
            "to_add_out",
        ),
        gradient_checkpointing_default=True,
        text_encoder_label="Qwen2.5-VL",
        repeated_block_classes=("HunyuanVideo15TransformerBlock",),
        block_lists=("transformer_blocks",),
        # each batch's captions keep their own token count (the ragged cache): a length that changes with them
        compile_dynamic=True,
    )


def hunyuanvideo15_spec(name: str = "hunyuanvideo15") -> FamilySpec:
    """A new spec of ``name``: ``hunyuanvideo15`` (text-to-video) or ``hunyuanvideo15_i2v`` (image-to-video)."""
    task = TASKS[name]
    info = hunyuanvideo15_info(task)
    encoders = HunyuanVideo15Encoders(task)
    return diffusion_spec(
        name,
        info,
        model=HunyuanVideo15Model(info, task),
        encoders=encoders,
        loss=lambda encoders: HunyuanVideo15Loss(encoders, image_to_video=task.task == "i2v"),
        samples=lambda encoders: HunyuanVideo15Samples(task, encoders),
        plan=lambda encoders, loss, _: HunyuanVideo15Plan(task, encoders, loss),
        data=ClipData(),
        adapter=HunyuanVideo15Adapter(info, fp32_vae=HUNYUANVIDEO15_VAE),
        video_frames=task,
        card=HunyuanVideo15Card(task),
        exports=EXPORT,
        defaults=DEFAULTS,
        notes=HunyuanVideo15Notes(task),
        setup=HunyuanVideo15Setup(encoders, task),
        demo=HunyuanVideo15Demo(task),
    )
