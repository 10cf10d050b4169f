"""Wan 2.1 and 2.2 text-to-video (``wan``, ``WanPipeline``) and image-to-video (``wan_i2v``, :mod:`.i2v`): their
:class:`~dit_lora.contract.spec.FamilySpec`.

Components, one module each: ``info.py`` (the checkpoint's configs read once; the task: experts, clip buckets,
frame rate), ``model.py`` (checks, loading, precision, notes, defaults, demo), ``encoders.py``, ``loss.py`` (and
the clip data path), ``samples.py``, ``plan.py``, ``adapter.py`` (adapter files, exports, card), ``experts.py``
(the A14B experts and their checkpointing switch), ``kernels.py``; ``i2v.py`` subclasses what image-to-video changes.
What a run decides is its ``WanRun`` (``state.py``) in ``comps.state``.

Checkpoints. Read from the small configs (:mod:`.info`): Wan 2.1 T2V 1.3B/14B, Wan 2.2 TI2V-5B (48-channel VAE,
``expand_timesteps``: per-token timesteps) and Wan 2.2 T2V-A14B (two experts split at ``boundary_ratio``,
:mod:`.experts`).

Latents. Clips ``(B, F, 3, H, W)`` in [-1, 1] go through ``AutoencoderKLWan`` in fp32 (as diffusers' Wan docs
load it) as ``(B, 3, F, H, W)``; the cache holds the posterior mode normalised as the pipelines normalise:
``(z - latents_mean) / latents_std`` (``WanImageToVideoPipeline.prepare_latents`` normalises the condition this
way; ``WanPipeline`` decodes with the inverse), as ``(B, C, F', h, w)`` with ``F' = (F - 1) / 4 + 1``.

Loss (rectified flow). Wan's own repositories publish no trainer; the training schedule here is
``FlowMatchEulerDiscreteScheduler`` with the checkpoint's ``flow_shift`` (its scheduler config, or
``--flow_shift``): ``sigma`` from the shifted table, ``x_t = (1 - sigma) x0 + sigma eps``, timestep ``1000
sigma``, target ``eps - x0`` (the velocity the Wan pipelines integrate with ``UniPCMultistepScheduler``'s flow
prediction), plain MSE in fp32. Timesteps: ``uniform`` over the table (DiffSynth-Studio's Wan trainer) or
``logit_normal`` (:mod:`dit_lora.modeling.flow_matching`). A two-expert run draws from the trained expert's part
of the table only. TI2V-5B: every token gets its own timestep as ``WanPipeline`` passes them with
``expand_timesteps``; in image mode (``--ti2v_image_probability``) the first latent frame is the clean latent
with timestep 0 and is left out of the loss, as the pipeline keeps it fixed.

Precision. Transformer and UMT5 in the run's dtype (bf16 by default); VAE (and 2.1 I2V's CLIP) in fp32; LoRA fp32.

Saving. ``WanPipeline.save_lora_weights`` with the LoRA config as metadata, alpha / rank folded into lora_B
(:func:`dit_lora.output.adapter.fold_lora_scale`). Beside it (:class:`~.adapter.WanExports`): which
expert each file is for (``dit_lora_adapter_files.json``, read by :func:`dit_lora.output.adapter.load_adapter_files`:
the low-noise expert loads with ``load_into_transformer_2=True``) and the ComfyUI-format files (:mod:`.comfyui`).
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.wan.adapter import WanAdapter, WanCard, WanExports
from dit_lora.families.wan.encoders import WanEncoders
from dit_lora.families.wan.experts import WanTrainables
from dit_lora.families.wan.i2v import (
    WanI2VAdapter,
    WanI2VCard,
    WanI2VEncoders,
    WanI2VLoss,
    WanI2VModel,
    WanI2VPlan,
    WanI2VSamples,
    WanI2VSetup,
)
from dit_lora.families.wan.info import I2V_PIPELINE, T2V_PIPELINE, WanTask
from dit_lora.families.wan.kernels import patch_points
from dit_lora.families.wan.loss import WanLoss
from dit_lora.families.wan.model import DEFAULTS, WanDemo, WanModel, WanNotes, WanPrecision
from dit_lora.families.wan.plan import WanPlan
from dit_lora.families.wan.samples import WanSamples
from dit_lora.kit.builder import PatchPoints, diffusion_spec
from dit_lora.kit.video_sizes import ClipData

#: the two tasks: the registry name, the task, the checkpoint kinds it trains, its pipeline
TASKS = {
    "wan": WanTask(name="wan", task="t2v", kinds=("t2v", "ti2v"), pipeline_class_name=T2V_PIPELINE),
    "wan_i2v": WanTask(name="wan_i2v", task="i2v", kinds=("i2v", "ti2v"), pipeline_class_name=I2V_PIPELINE),
}


def wan_info(task: WanTask) -> FamilyInfo:
    """What the model card, the loader and ``--compile`` say about the family of ``task``."""
    return FamilyInfo(
        pipeline_class_name=task.pipeline_class_name,
        # Wan 2.2 TI2V-5B is a WanPipeline folder that image-to-video trains too (model.py checks the kind)
        also_trains_folders_of=(T2V_PIPELINE,) if task.task == "i2v" else (),
        card_tags=(
            "text-to-video" if task.task == "t2v" else "image-to-video",
            "diffusers",
            "wan",
            "diffusers-training",
        ),
        # Attention and FFN of every block: DiffSynth-Studio's Wan default ("q,k,v,o,ffn.0,ffn.2") in diffusers' names.
        default_lora_layers=("to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2"),
        gradient_checkpointing_default=True,
        text_encoder_label="UMT5-XXL",
        repeated_block_classes=("WanTransformerBlock",),
        block_lists=("blocks", "high.blocks", "low.blocks"),  # one transformer, or both A14B experts (WanExperts)
    )


def wan_spec(name: str = "wan") -> FamilySpec:
    """A new spec of ``name``: ``wan`` (T2V 1.3B, 14B; TI2V-5B; T2V-A14B) or ``wan_i2v`` (2.1 I2V 14B, 2.2
    I2V-A14B, TI2V-5B's image mode); image-to-video takes the subclasses of :mod:`.i2v`."""
    task = TASKS[name]
    info = wan_info(task)
    i2v = task.task == "i2v"
    samples, plan = (WanI2VSamples, WanI2VPlan) if i2v else (WanSamples, WanPlan)
    return diffusion_spec(
        name,
        info,
        model=(WanI2VModel if i2v else WanModel)(info, task),
        encoders=(WanI2VEncoders if i2v else WanEncoders)(task),
        loss=WanI2VLoss if i2v else WanLoss,
        samples=lambda encoders: samples(task, encoders),
        plan=lambda encoders, loss, _: plan(task, encoders, loss),
        data=ClipData(),
        adapter=(WanI2VAdapter if i2v else WanAdapter)(info, task),
        video_frames=task,
        kernels=PatchPoints(patch_points),
        exports=WanExports(),
        card=(WanI2VCard if i2v else WanCard)(task),
        defaults=DEFAULTS,
        notes=WanNotes(task),
        trainables=WanTrainables(),
        precision=WanPrecision(),
        demo=WanDemo(task),
        **({"setup": WanI2VSetup(task)} if i2v else {}),
    )
