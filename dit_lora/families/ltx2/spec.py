"""LTX-2 text-to-video (``ltx2``, ``LTX2Pipeline``), image-to-video (``ltx2_i2v``, ``LTX2ImageToVideoPipeline``) and
in-context video-to-video (``ltx2_ic``, ``LTX2InContextPipeline``: IC-LoRA), with their sound, from one checkpoint:
their :class:`~dit_lora.contract.spec.FamilySpec`.

Components, one module each: ``info.py`` (the configs read once, the clip buckets), ``model.py`` (checks, loading,
precision, notes, defaults, demo), ``encoders.py`` (video latents, the connectors' caption embeddings, each clip's
sound and frame rate; setup), ``loss.py`` (both streams denoised together), ``samples.py`` (clips with sound),
``plan.py``, ``adapter.py`` (the card; the adapter file and reloading are the kit's), ``comfyui.py``; in-context
(IC-LoRA) adds its reference clips in each (the kit's ``reference_clips.py`` reads them). What a run decides is its
``LTX2Run`` (``state.py``). Precision: the transformer, Gemma-3 and the connectors in the run's dtype (bf16 by
default), both VAEs in fp32, LoRA fp32.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.ltx2.adapter import LTX2_VAE, LTX2Card
from dit_lora.families.ltx2.comfyui import EXPORTS, ICExports
from dit_lora.families.ltx2.encoders import LTX2Encoders, LTX2ICEncoders, LTX2ICSetup, LTX2Setup
from dit_lora.families.ltx2.info import I2V_PIPELINE, IC_PIPELINE, PIPELINE, LTX2Task
from dit_lora.families.ltx2.loss import LTX2ICData, LTX2ICLoss, LTX2Loss
from dit_lora.families.ltx2.model import DEFAULTS, LTX2Demo, LTX2Model, LTX2Notes
from dit_lora.families.ltx2.plan import LTX2ICPlan, LTX2Plan
from dit_lora.families.ltx2.samples import LTX2Samples
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.builder import diffusion_spec
from dit_lora.kit.video_sizes import ClipData

TASKS = {
    "ltx2": LTX2Task(name="ltx2", task="t2v", pipeline_class_name=PIPELINE),
    "ltx2_i2v": LTX2Task(name="ltx2_i2v", task="i2v", pipeline_class_name=I2V_PIPELINE),
    "ltx2_ic": LTX2Task(name="ltx2_ic", task="ic", pipeline_class_name=IC_PIPELINE),
}
#: each task's card tag
TASK_TAGS = {"t2v": "text-to-video", "i2v": "image-to-video", "ic": "video-to-video"}
#: text-to-video's task (the tests' and the demo's default)
TASK = TASKS["ltx2"]


def ltx2_info(task: LTX2Task) -> FamilyInfo:
    """What the model card, the loader and ``--compile`` say about the family of ``task``."""
    return FamilyInfo(
        pipeline_class_name=task.pipeline_class_name,
        # one checkpoint for both tasks: a folder saved by either pipeline trains either
        also_trains_folders_of=tuple(p for p in (PIPELINE, I2V_PIPELINE) if p != task.pipeline_class_name),
        card_tags=(
            TASK_TAGS[task.task],
            "text-to-audio",
            "diffusers",
            "ltx-2",
            "diffusers-training",
        ),
        # Both streams' attention projections and the attentions between them: what diffusers' LTX-2 LoRAs and
        # Lightricks' trainer ("to_k", "to_q", "to_v", "to_out.0") target in every block.
        default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
        gradient_checkpointing_default=True,
        text_encoder_label="Gemma-3",
        repeated_block_classes=("LTX2VideoTransformerBlock",),
        block_lists=("transformer_blocks",),
    )


def ltx2_spec(name: str = "ltx2") -> FamilySpec:
    """A new spec of ``name``: ``ltx2`` (text-to-video), ``ltx2_i2v`` (image-to-video) or ``ltx2_ic`` (in-context:
    a reference clip beside each clip, :mod:`.ic`)."""
    task = TASKS[name]
    info = ltx2_info(task)
    ic = task.task == "ic"
    encoders = LTX2ICEncoders() if ic else LTX2Encoders()
    exports = ICExports(EXPORTS, info.adapter_weight_name) if ic else EXPORTS
    return diffusion_spec(
        name,
        info,
        model=LTX2Model(info, task),
        encoders=encoders,
        loss=lambda encoders: LTX2ICLoss(encoders) if ic else LTX2Loss(encoders, image_to_video=task.task == "i2v"),
        samples=lambda encoders: LTX2Samples(task, encoders),
        plan=lambda encoders, loss, _: (LTX2ICPlan if ic else LTX2Plan)(task, encoders, loss),
        data=LTX2ICData() if ic else ClipData(),
        # image-to-video encodes its image in the pipeline's dtype: its VAE stays in that dtype (an fp32 VAE refuses
        # the bf16 image, LTX2ImageToVideoPipeline.prepare_latents)
        adapter=KitAdapter(info, fp32_vae=None if task.task == "i2v" else LTX2_VAE),
        video_frames=task,
        card=LTX2Card(task),
        exports=exports,
        defaults=DEFAULTS,
        notes=LTX2Notes(task),
        setup=(LTX2ICSetup if ic else LTX2Setup)(encoders, task),
        demo=LTX2Demo(task),
    )
