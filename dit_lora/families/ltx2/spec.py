"""LTX-2 text-to-video with its sound (``ltx2``, ``LTX2Pipeline``): its :class:`~dit_lora.contract.spec.FamilySpec`.

Components, one module each: ``info.py`` (the configs read once, the clip buckets), ``model.py`` (checks, loading,
precision, notes, defaults, demo), ``encoders.py`` (video latents, the connectors' caption embeddings, each clip's
sound and frame rate; setup), ``loss.py`` (both streams denoised together), ``samples.py`` (clips with sound),
``plan.py``, ``adapter.py`` (the card; the adapter file and reloading are the kit's). What a run decides is its
``LTX2Run`` (``state.py``). Precision: the transformer, Gemma-3 and the connectors in the run's dtype (bf16 by
default), both VAEs in fp32, LoRA fp32.
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.diffusion.adapter import KitAdapter
from dit_lora.families.diffusion.builder import diffusion_spec
from dit_lora.families.diffusion.video_sizes import ClipData
from dit_lora.families.ltx2.adapter import LTX2_VAE, LTX2Card
from dit_lora.families.ltx2.encoders import LTX2Encoders, LTX2Setup
from dit_lora.families.ltx2.info import PIPELINE, LTX2Task
from dit_lora.families.ltx2.loss import LTX2Loss
from dit_lora.families.ltx2.model import DEFAULTS, LTX2Demo, LTX2Model, LTX2Notes
from dit_lora.families.ltx2.plan import LTX2Plan
from dit_lora.families.ltx2.samples import LTX2Samples

TASK = LTX2Task(name="ltx2", task="t2v", pipeline_class_name=PIPELINE)

INFO = FamilyInfo(
    pipeline_class_name=PIPELINE,
    card_tags=("text-to-video", "text-to-audio", "diffusers", "ltx-2", "diffusers-training"),
    # Both streams' attention projections and the attentions between them: what diffusers' LTX-2 LoRAs and
    # Lightricks' trainer ("to_k", "to_q", "to_v", "to_out.0") target in every block.
    default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
    gradient_checkpointing_default=True,
    text_encoder_label="Gemma-3",
    repeated_block_classes=("LTX2VideoTransformerBlock",),
    block_lists=("transformer_blocks",),
)


def ltx2_spec(name: str = "ltx2") -> FamilySpec:
    """A new spec of LTX-2 text-to-video."""
    encoders = LTX2Encoders()
    return diffusion_spec(
        name,
        INFO,
        model=LTX2Model(INFO, TASK),
        encoders=encoders,
        loss=LTX2Loss,
        samples=lambda encoders: LTX2Samples(TASK, encoders),
        plan=lambda encoders, loss, _: LTX2Plan(TASK, encoders, loss),
        data=ClipData(),
        adapter=KitAdapter(INFO, fp32_vae=LTX2_VAE),
        video_frames=TASK,
        frame_rate=TASK,
        card=LTX2Card(TASK),
        defaults=DEFAULTS,
        notes=LTX2Notes(TASK),
        setup=LTX2Setup(encoders),
        demo=LTX2Demo(TASK),
    )
