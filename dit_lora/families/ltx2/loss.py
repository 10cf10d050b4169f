"""LTX-2's loss: the video and audio streams denoised together, as Lightricks' LTX-2 trainer trains them.

Both streams are packed as ``LTX2Pipeline`` packs them (video ``(B, F' h w, C)``, audio ``(B, L, C M')``), noised to
one sigma per clip (``x_t = (1 - sigma) x0 + sigma eps``), and the transformer predicts each stream's velocity
``eps - x0`` from timestep ``1000 sigma`` (as the pipeline calls it: ``sigma`` and the cross-modal timesteps the
same). Sigma is drawn as the LTX-2 trainer draws it (``timestep_samplers.py``, ``shifted_logit_normal``): a
logit-normal whose mean moves with the video tokens (0.95 at 1,024 tokens, 2.05 at 4,096, linear), stretched
between its 0.5th and 99.9th percentiles onto [0, 1] (values under 0.001 reflected), and one draw in ten uniform.

The loss is the video MSE plus ``--audio_loss_weight`` times the audio MSE over the latent steps each clip's track
covers (:func:`~dit_lora.kit.clip_audio.masked_audio_mse`: a clip without sound adds nothing). With
``--audio off`` the audio stream is given pure noise at timestep 1000, the state generation starts from, and has no
loss. The transformer places video tokens in time at each clip's own frame rate (its sound spans
``frames / fps`` seconds); a batch of clips of several rates takes its first clip's.

Image-to-video is ``LTX2ImageToVideoPipeline``'s denoising step: the first latent frame is the clean latent of the
first frame (the video VAE is causal in time, so the clip's own first latent frame is the image's), its tokens get
timestep 0 (the pipeline's ``timestep * (1 - conditioning_mask)`` per token; the audio stream's and ``sigma`` stay
the clip's), and it is left out of the loss. ``--first_frame_conditioning_p`` does the same for text-to-video and
in-context steps, the whole batch on that share of the steps (Lightricks' ``first_frame_conditioning_p``: 0.1 there).

In-context (IC-LoRA, ``--family ltx2_ic``, ``LTX2InContextPipeline``): each clip trained with its reference
clip (a depth, pose or edge video, ...) beside it, as diffusers' ``pipeline_ltx2_ic_lora.py`` generates and Lightricks'
LTX-2 trainer (``video_to_video`` strategy) trains.

What differs from text-to-video (diffusers 0.42.1; Lightricks' ``video_to_video.py``): the reference clip is decoded
frame for frame with its clip at the clip's size divided by ``--reference_downscale_factor``, encoded by the video VAE
(normalised as the clip's latents) and cached beside them; in the step its tokens are appended after the clip's, clean,
at timestep 0 (the pipeline's ``t * (1 - conditioning_mask)`` with the reference's strength 1), at their own positions
(``rope.prepare_video_coords`` of the reference's latent size at the clip's frame rate, height and width scaled by the
factor into the clip's space), and left out of the loss. The video self-attention is not masked (the pipeline's
``conditioning_attention_strength`` 1). The sound trains as text-to-video's does. The factor is written into the
adapter's safetensors metadata (``reference_downscale_factor``, as Lightricks' trainer writes it).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.ltx2.encoders import FPS, REFERENCE
from dit_lora.families.ltx2.info import TRAINED
from dit_lora.families.ltx2.state import run_state
from dit_lora.kit.clip_audio import LATENTS, MASK, masked_audio_mse
from dit_lora.kit.components import DiffusionLoss
from dit_lora.kit.reference_clips import ReferenceFlags, ReferenceMedia
from dit_lora.kit.video_sizes import ClipData
from dit_lora.modeling.flow_matching import noisy_latents, velocity_target, weighted_mse

#: the LTX-2 trainer's shift line (tokens, logit mean) and its stretch: percentiles, reflection, uniform share
SHIFT_LINE = ((1024, 0.95), (4096, 2.05))
UPPER, LOWER, EPS, UNIFORM = 3.0902, -2.5758, 1e-3, 0.1


def shifted_logit_normal(batch: int, tokens: int, device, generator: torch.Generator | None, std: float = 1.0):
    """One sigma per clip (float32 ``[batch]``), drawn as the LTX-2 trainer's ``ShiftedLogitNormalTimestepSampler``
    draws it for ``tokens`` video tokens (module docstring)."""
    (x1, y1), (x2, y2) = SHIFT_LINE
    mu = y1 + (y2 - y1) * (tokens - x1) / (x2 - x1)
    normal = torch.randn(batch, device=device, generator=generator) * std + mu
    # the percentile bounds are numbers of the token count alone: computed on the host, no tensor copied per step
    low, high = (1.0 / (1.0 + math.exp(-(mu + z * std))) for z in (LOWER, UPPER))
    stretched = (torch.sigmoid(normal) - low) / (high - low)
    stretched = torch.where(stretched >= EPS, stretched, 2 * EPS - stretched).clamp(0, 1)
    uniform = (1 - EPS) * torch.rand(batch, device=device, generator=generator) + EPS
    pick = torch.rand(batch, device=device, generator=generator)
    return torch.where(pick > UNIFORM, stretched, uniform)


def pack_video(latents: torch.Tensor) -> torch.Tensor:
    """``(B, C, F', h, w)`` -> ``(B, F' h w, C)``: ``LTX2Pipeline._pack_latents`` at patch 1 (LTX-2's)."""
    return latents.flatten(2).transpose(1, 2)


class LTX2Loss(DiffusionLoss):
    """``FamilySpec.loss``: the joint velocity MSE of one micro-batch (module docstring); image-to-video: the first
    latent frame given clean, its tokens at timestep 0, out of the loss."""

    def __init__(self, encoders, image_to_video: bool = False) -> None:
        super().__init__(encoders)
        self.image_to_video = image_to_video

    def prepare_batch(self, comps: Components, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """The batch on ``device``, the clips' frame rate read first from the host copy (a float, no device read)."""
        fps = batch.pop(FPS, None)  # the model needs it as a number: it never goes to the device
        rate = float(fps[0]) if isinstance(fps, torch.Tensor) and fps.numel() else 0.0
        out = super().prepare_batch(comps, batch, device, cached)
        out["fps"] = rate if rate > 0 else float(TRAINED["fps"])
        return out

    def first_frame(
        self,
        video: torch.Tensor,
        noisy: torch.Tensor,
        timestep: torch.Tensor,
        grid: tuple[int, int],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None]:
        """``(noisy tokens, their timesteps, the first token in the loss, per-token loss weights or None)``.

        Image-to-video: the first latent frame (``grid``: latent frames, tokens a frame) clean at timestep 0, out of
        the loss. Otherwise, with ``--first_frame_conditioning_p`` and more than one latent frame: the same for the
        whole batch on a share of the steps, as Lightricks' trainer does; the draw is a device tensor from the run's
        generator (no host sync, resumed bit for bit), so the frame's tokens take it as a 0/1 weight."""
        frames, per_frame = grid
        if self.image_to_video:  # LTX2ImageToVideoPipeline's step: frame 0 clean, its tokens at timestep 0
            noisy = torch.cat([video[:, :per_frame], noisy[:, per_frame:]], dim=1)
            per_token = timestep[:, None].expand(video.shape[0], video.shape[1]).clone()
            per_token[:, :per_frame] = 0.0
            return noisy, per_token, per_frame, None
        p = float(getattr(cfg.family_options, "first_frame_conditioning_p", 0.0) or 0.0)
        if p <= 0 or frames < 2:
            return noisy, timestep, 0, None
        drawn = torch.rand((), generator=generator, device=video.device) < p
        given = torch.zeros(video.shape[1], dtype=torch.bool, device=video.device)
        given[:per_frame] = True
        given = given & drawn
        noisy = torch.where(given[None, :, None], video, noisy)
        per_token = torch.where(given[None, :], timestep.new_zeros(()), timestep[:, None].expand(-1, video.shape[1]))
        return noisy, per_token, 0, (~given).float()

    def in_context(
        self, comps: Components, batch: dict[str, Any], noisy: torch.Tensor, timestep: torch.Tensor, fps: float
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """The video tokens, their timesteps and more transformer arguments with any tokens a task appends after the
        clip's (none here: an in-context task's reference clip, :class:`LTX2ICLoss`)."""
        return noisy, timestep, {}

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Noise and a sigma per clip, both streams' velocities predicted, the weighted sum of their MSEs."""
        state = run_state(comps)
        fps = float(batch.get("fps") or TRAINED["fps"])  # a plan's batch has no clips: the model's rate
        latents = batch["latents"]
        bsz, _, frames, height, width = latents.shape
        video = pack_video(latents)
        noise = torch.randn(video.shape, generator=generator, device=video.device, dtype=video.dtype)
        sigmas = shifted_logit_normal(bsz, video.shape[1], video.device, generator).to(video.dtype)
        sound = state.with_audio and LATENTS in batch
        if sound:
            audio = batch[LATENTS].to(video.dtype)
        else:  # --audio off: the frames' span of pure noise at timestep 1000, the state generation starts from
            seconds = ((frames - 1) * state.vae_temporal + 1) / fps
            steps = max(1, round(seconds * (state.audio.latents_per_second if state.audio else 25.0)))
            audio = video.new_zeros(bsz, steps, state.audio_width)
        audio_noise = torch.randn(audio.shape, generator=generator, device=audio.device, dtype=audio.dtype)
        audio_sigmas = sigmas if sound else torch.ones_like(sigmas)
        dtype = batch["prompt_embeds"].dtype
        timestep, audio_timestep = sigmas * 1000.0, audio_sigmas * 1000.0
        noisy, video_timestep, first, weight = self.first_frame(
            video, noisy_latents(video, noise, sigmas), timestep, (frames, height * width), generator, cfg
        )
        tokens = video.shape[1]
        noisy, video_timestep, context = self.in_context(comps, batch, noisy, video_timestep, fps)
        pred, audio_pred = model(
            hidden_states=noisy.to(dtype),
            audio_hidden_states=noisy_latents(audio, audio_noise, audio_sigmas).to(dtype),
            encoder_hidden_states=batch["prompt_embeds"],
            audio_encoder_hidden_states=batch["audio_prompt_embeds"],
            encoder_attention_mask=batch["prompt_attention_mask"],
            audio_encoder_attention_mask=batch["prompt_attention_mask"],
            timestep=video_timestep,
            audio_timestep=audio_timestep,
            sigma=timestep,
            audio_sigma=audio_timestep,
            num_frames=frames,
            height=height,
            width=width,
            fps=fps,
            audio_num_frames=audio.shape[1],
            use_cross_timestep=True,
            return_dict=False,
            **context,
        )
        ones = torch.ones_like(sigmas, dtype=torch.float32)
        # the pipeline never steps the conditioning frame (nor an in-context reference, after the clip): they teach
        # nothing
        target = velocity_target(video, noise)
        if weight is None:
            loss = weighted_mse(pred[:, first:tokens], target[:, first:], ones)
        else:  # a step conditioned on its first frame or not, decided on the device: the frame's tokens weigh 0 or 1
            per_token = (pred[:, :tokens].float() - target.float()).pow(2).mean(dim=-1)
            loss = ((per_token * weight).sum(dim=1) / weight.sum()).mean()
        if not sound:
            return loss
        audio_loss = masked_audio_mse(audio_pred, velocity_target(audio, audio_noise), batch[MASK], ones)
        return loss + cfg.family_options.audio_loss_weight * audio_loss


def reference_coords(model, reference: torch.Tensor, factor: int, fps: float) -> torch.Tensor:
    """The reference tokens' positions ``(B, 3, n, 2)``: ``rope.prepare_video_coords`` of the reference's latent size,
    height and width scaled by ``factor`` into its clip's space (``LTX2InContextPipeline._encode_reference_conditions``)."""
    bsz, _, frames, height, width = reference.shape
    coords = model.rope.prepare_video_coords(bsz, frames, height, width, reference.device, fps=fps)
    if factor != 1:
        coords[:, 1:3] = coords[:, 1:3] * factor
    return coords


class LTX2ICLoss(LTX2Loss):
    """``FamilySpec.loss``: text-to-video's, the clip's reference tokens appended clean at timestep 0 with their own
    positions, out of the loss (module docstring)."""

    def in_context(
        self, comps: Components, batch: dict[str, Any], noisy: torch.Tensor, timestep: torch.Tensor, fps: float
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """The clip's tokens then its reference's; their timesteps (the reference's 0); both tokens' positions."""
        model: Any = comps.model  # the transformer (its rope makes the positions)
        state = run_state(comps)
        latents, reference = batch["latents"], batch[REFERENCE].to(noisy.dtype)
        bsz, _, frames, height, width = latents.shape
        coords = model.rope.prepare_video_coords(bsz, frames, height, width, noisy.device, fps=fps)
        tokens = pack_video(reference)
        per_token = timestep[:, None].expand(bsz, noisy.shape[1]) if timestep.ndim == 1 else timestep
        timesteps = torch.cat([per_token, per_token.new_zeros(bsz, tokens.shape[1])], dim=1)
        context = {
            "video_coords": torch.cat([coords, reference_coords(model, reference, state.reference_factor, fps)], 2)
        }
        return torch.cat([noisy, tokens], dim=1), timesteps, context


#: the option names the kit's reference data reads
FLAGS = ReferenceFlags("reference_column", "reference_dir", "reference_downscale_factor", "LTX-2 IC-LoRA")


class LTX2ICData(ClipData):
    """``FamilySpec.data``: every clip with its reference clip (the kit's :class:`ReferenceMedia`)."""

    def data_handler(self, cfg: TrainConfig, spec):
        """The reference clip handler over the run's cache folder."""
        from dit_lora.data.prepare_cache import cache_root_for

        return ReferenceMedia(cfg, spec, cache_root_for(cfg.data), flags=FLAGS)
