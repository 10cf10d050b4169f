"""CogVideoX text-to-video (``cogvideox``, ``CogVideoXPipeline``) and image-to-video (``cogvideox_i2v``,
``CogVideoXImageToVideoPipeline``): one implementation, two registered families, each a
:class:`~dit_lora.contract.spec.FamilySpec` (:func:`cogvideox_spec`).

The components live beside this file, one module each: ``info.py`` (the model info read once, the video buckets
and their checks, the frame rate), ``model.py`` (checks, loading, precision, defaults, notes, demo),
``encoders.py``, ``loss.py`` (the clip data is the kit's), ``samples.py``, ``plan.py``, ``adapter.py`` (saving, loading back, the model card),
``i2v.py`` (what image-to-video changes), ``kernels.py``; what a run decides is its ``CogVideoXRun``
(``state.py``) in ``comps.state``.

Versions. Read from the checkpoint's small configs (never guessed from its name): CogVideoX 1.0 2B
(fixed sin-cos positions, scheduler ``snr_shift_scale`` 3.0), 1.0 5B (RoPE; the 5B I2V adds a learned
position table that only runs at its trained size) and 1.5 (RoPE, ``patch_size_t`` 2, I2V with an
``ofs`` embedding). T2V vs I2V: the transformer takes ``2 x`` the VAE's latent channels for I2V
(noisy video latents and the first-frame image latents, concatenated on the channel axis).

Clips and latents. Pixel clips ``(B, F, 3, H, W)`` with ``F = 4k + 1`` go through the VAE as
``(B, 3, F, H, W)``; the cache holds the posterior mean (``latent_dist.mode()``, so the cache is
deterministic; the reference trainers sample) times ``scaling_factor``, as ``(B, F', C, h, w)`` with
``F' = (F - 1) / 4 + 1``. I2V also caches the first frame encoded alone (``(B, 1, C, h, w)``), scaled
like ``CogVideoXImageToVideoPipeline.prepare_latents`` does: times ``scaling_factor``, or divided by
it when the VAE has ``invert_scale_latents`` (CogVideoX 1.5).

Video size. Default: the size the checkpoint was trained at (:meth:`~.info.ModelInfo.trained_size`): 480x720, 49
frames for 1.0; 768x1360, 81 frames for 1.5, whose config's ``sample_height``/``sample_width`` (300, i.e.
2400 px, what diffusers' pipelines default to) bound its RoPE grid. The run prints the size and why; sizes
far from the trained one (over 2x or under 1/4 of its latent tokens per clip) need
``--allow_untrained_resolution``.

Loss (the reference trainers'; math in :mod:`.loss`): ``t`` uniform over 0..999 (or
``--timestep_sampling logit_normal``), ``x_t = scheduler.add_noise(x0, eps, t)`` with the checkpoint's
``CogVideoXDDIMScheduler`` config, the transformer predicts ``v``, ``x0_hat = get_velocity(v, x_t, t)``,
loss ``= mean_b w_t mean((x0_hat - x0)^2)`` with ``w_t = 1 / (1 - alpha_bar_t)`` (``--loss_weight_cap``
clamps it). RoPE is computed by the pipeline's own ``_prepare_rotary_positional_embeddings`` for the
latent geometry (cached per size), so training and inference positions are identical.

CogVideoX 1.5 padding. ``patch_size_t`` 2 needs an even latent frame count; the pipelines generate
``patch_size_t - F' % patch_size_t`` extra latent frames and drop them from the front after denoising.
Training prepends that many copies of the first latent frame (as THUDM's trainer does) and the loss
covers every frame. I2V: the image latent sits at frame 0 of the padded sequence and the other frames
are zeros, which is exactly what ``prepare_latents`` builds for the padded frame count.

I2V conditioning. Per sample and step, ``--first_frame_noise`` adds ``sigma * eps`` with
``sigma = exp(N(-3, 0.5))`` to the cached image latents and ``--noised_image_dropout`` zeroes them with
that probability. (The reference trainers add this noise to the image *pixels* before encoding; a
latent cache cannot, so it is added to the latents.) 1.5 I2V passes ``ofs = 2.0`` like the pipeline.

Precision. Transformer, VAE and T5 load in the run's dtype (bf16 by default), as the reference
trainers run them; LoRA trains in fp32. Timesteps and noise are drawn on the device with the run's
generator (no host copy, no sync).

Saving. ``CogVideoXPipeline.save_lora_weights`` (``CogVideoXLoraLoaderMixin``, shared by the I2V
pipeline) with the LoRA config as metadata; the scale alpha / rank is folded into ``lora_B`` and the metadata
says alpha = rank (:func:`dit_lora.output.adapter.fold_lora_scale`), so loaders with or without it agree.
Validation videos are MP4 files (:mod:`dit_lora.output.video`) at 8 fps (1.0) or 16 fps (1.5).
"""

from __future__ import annotations

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.cogvideox.adapter import CogVideoXAdapter, CogVideoXCard
from dit_lora.families.cogvideox.encoders import CogVideoXEncoders
from dit_lora.families.cogvideox.i2v import (
    CogVideoXI2VCard,
    CogVideoXI2VEncoders,
    CogVideoXI2VLoss,
    CogVideoXI2VModel,
    CogVideoXI2VSamples,
    CogVideoXI2VSetup,
)
from dit_lora.families.cogvideox.info import CogVideoXVideo
from dit_lora.families.cogvideox.kernels import patch_points
from dit_lora.families.cogvideox.loss import CogVideoXLoss
from dit_lora.families.cogvideox.model import (
    DEFAULTS,
    CogVideoXDemo,
    CogVideoXModel,
    CogVideoXNotes,
    CogVideoXPrecision,
)
from dit_lora.families.cogvideox.plan import CogVideoXPlan
from dit_lora.families.cogvideox.samples import CogVideoXSamples
from dit_lora.kit.builder import PatchPoints, diffusion_spec
from dit_lora.kit.video_sizes import ClipData


def _info(task_tag: str, pipeline: str) -> FamilyInfo:
    return FamilyInfo(
        pipeline_class_name=pipeline,
        card_tags=(task_tag, "diffusers", "cogvideox", "diffusers-training"),
        default_lora_layers=("to_q", "to_k", "to_v", "to_out.0"),
        gradient_checkpointing_default=True,
        text_encoder_label="T5-XXL",
        block_lists=("transformer_blocks",),
    )


#: what the model card, the loader and ``--compile`` say about each task, by family name
INFO = {
    "cogvideox": _info("text-to-video", "CogVideoXPipeline"),
    "cogvideox_i2v": _info("image-to-video", "CogVideoXImageToVideoPipeline"),
}


def cogvideox_spec(name: str = "cogvideox") -> FamilySpec:
    """A new spec of ``name``: ``cogvideox`` (CogVideoX 1.0 2B/5B and 1.5 text-to-video) or ``cogvideox_i2v``
    (1.0 5B and 1.5 image-to-video: the first frame conditions the video)."""
    i2v = name == "cogvideox_i2v"
    info, video = INFO[name], CogVideoXVideo()
    encoders = (CogVideoXI2VEncoders if i2v else CogVideoXEncoders)(info, video)
    samples = CogVideoXI2VSamples if i2v else CogVideoXSamples
    setup = {"setup": CogVideoXI2VSetup(video)} if i2v else {}
    return diffusion_spec(
        name,
        info,
        model=(CogVideoXI2VModel if i2v else CogVideoXModel)(info, encoders.task, video),
        encoders=encoders,
        loss=lambda encoders: (CogVideoXI2VLoss if i2v else CogVideoXLoss)(encoders, info),
        samples=lambda encoders: samples(encoders, info, video),
        plan=lambda encoders, loss, _: CogVideoXPlan(video, encoders, loss),
        data=ClipData(),
        adapter=CogVideoXAdapter(info),
        video_frames=video,
        kernels=PatchPoints(patch_points),
        card=(CogVideoXI2VCard if i2v else CogVideoXCard)(info, video),
        defaults=DEFAULTS,
        notes=CogVideoXNotes(video),
        precision=CogVideoXPrecision(),
        demo=CogVideoXDemo(encoders.task, video),
        **setup,
    )
