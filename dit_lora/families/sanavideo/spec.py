"""SANA-Video text-to-video (``sanavideo``, ``SanaVideoPipeline``) and image-to-video (``sanavideo_i2v``,
``SanaImageToVideoPipeline``): their :class:`~dit_lora.contract.spec.FamilySpec`.

Components, one module each: ``info.py`` (the configs read once, the task, the clip buckets), ``model.py`` (checks,
loading, precision, notes, defaults, demo), ``encoders.py`` (Wan-VAE latents, Gemma-2 captions, setup),
``loss.py`` (rectified flow as NVlabs trains it; the first frame of image-to-video), ``samples.py`` (videos),
``plan.py``, ``adapter.py`` (the card; the adapter file and reloading are the kit's), ``kernels.py``. What a run decides is its ``SanaVideoRun`` (``state.py``).
Precision: transformer and Gemma-2 in the run's dtype (bf16 by default), the Wan VAE in fp32, LoRA fp32.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.sanavideo.adapter import SANA_VIDEO_VAE, SanaVideoCard
from dit_lora.families.sanavideo.encoders import SanaVideoEncoders, SanaVideoSetup
from dit_lora.families.sanavideo.info import I2V_PIPELINE, T2V_PIPELINE, SanaVideoTask
from dit_lora.families.sanavideo.kernels import patch_points
from dit_lora.families.sanavideo.loss import SanaVideoLoss
from dit_lora.families.sanavideo.model import (
    DEFAULTS,
    SanaVideoDemo,
    SanaVideoModel,
    SanaVideoNotes,
)
from dit_lora.families.sanavideo.plan import SanaVideoPlan
from dit_lora.families.sanavideo.samples import SanaVideoSamples
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.builder import PatchPoints, diffusion_spec
from dit_lora.kit.video_sizes import ClipData

TASKS = {
    "sanavideo": SanaVideoTask(name="sanavideo", task="t2v", pipeline_class_name=T2V_PIPELINE),
    "sanavideo_i2v": SanaVideoTask(name="sanavideo_i2v", task="i2v", pipeline_class_name=I2V_PIPELINE),
}


def sanavideo_info(task: SanaVideoTask) -> FamilyInfo:
    """What the model card, the loader and ``--compile`` say about the family of ``task``."""
    return FamilyInfo(
        pipeline_class_name=task.pipeline_class_name,
        # one checkpoint for both tasks: a folder saved by either pipeline trains either
        also_trains_folders_of=(I2V_PIPELINE if task.task == "t2v" else T2V_PIPELINE,),
        card_tags=(
            "text-to-video" if task.task == "t2v" else "image-to-video",
            "diffusers",
            "sana-video",
            "diffusers-training",
        ),
        # The attention projections of both attentions, as diffusers' Sana LoRA example and SimpleTuner's SANA-Video.
        default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
        gradient_checkpointing_default=True,
        text_encoder_label="Gemma-2",
        repeated_block_classes=("SanaVideoTransformerBlock",),
        block_lists=("transformer_blocks",),
    )


def sanavideo_spec(name: str = "sanavideo") -> FamilySpec:
    """A new spec of ``name``: ``sanavideo`` (text-to-video) or ``sanavideo_i2v`` (image-to-video)."""
    task = TASKS[name]
    info = sanavideo_info(task)
    encoders = SanaVideoEncoders(task)
    return diffusion_spec(
        name,
        info,
        model=SanaVideoModel(info, task),
        encoders=encoders,
        loss=lambda encoders: SanaVideoLoss(encoders, image_to_video=task.task == "i2v"),
        samples=lambda encoders: SanaVideoSamples(task, encoders),
        plan=lambda encoders, loss, _: SanaVideoPlan(task, encoders, loss),
        data=ClipData(),
        adapter=KitAdapter(info, fp32_vae=SANA_VIDEO_VAE),
        video_frames=task,
        kernels=PatchPoints(patch_points),
        card=SanaVideoCard(task),
        defaults=DEFAULTS,
        notes=SanaVideoNotes(task),
        setup=SanaVideoSetup(encoders, task),
        demo=SanaVideoDemo(task),
    )
