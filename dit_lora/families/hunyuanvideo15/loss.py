"""HunyuanVideo 1.5's loss (its data path: the kit's clips, :class:`~dit_lora.kit.video_sizes.ClipData`).

Rectified flow with diffusers' training pieces (:mod:`dit_lora.modeling.flow_matching`): ``sigma`` from the shifted
``FlowMatchEulerDiscreteScheduler`` table at a ``--weighting_scheme`` draw, ``x_t = (1 - sigma) x0 + sigma eps``,
timestep ``1000 sigma``, target ``eps - x0`` (the velocity the pipelines' Euler sampler integrates), MSE in fp32.

The transformer reads 65 channels, as the pipelines build them each step: the noisy latents, the condition latents
and a mask. Text-to-video: both zero, and zero image tokens (the transformer then masks them out). Image-to-video
(``HunyuanVideo15ImageToVideoPipeline.prepare_cond_latents_and_mask``): the first frame's latent in the condition's
first frame (the VAE is causal in time: the clip's own first latent frame is the image's), mask 1 there, SigLIP's
tokens of the first frame; every frame is noised, predicted and in the loss, as the pipeline steps them all.
"""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.hunyuanvideo15.encoders import padded_prompt
from dit_lora.families.hunyuanvideo15.state import required, run_state
from dit_lora.kit.components import DiffusionLoss
from dit_lora.modeling.flow_matching import loss_weighting, noisy_latents, option_draw, velocity_target, weighted_mse


def condition_channels(latents: torch.Tensor, image_to_video: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The condition latents and mask beside the noisy latents ``(B, C, F', h, w)``: zeros for text-to-video; the
    clean first latent frame and 1 on it for image-to-video."""
    cond = torch.zeros_like(latents)
    mask = latents.new_zeros(latents.shape[0], 1, *latents.shape[2:])
    if image_to_video:
        cond[:, :, :1] = latents[:, :, :1]
        mask[:, :, :1] = 1.0
    return cond, mask


def image_tokens(model: Any, batch: dict[str, Any], like: torch.Tensor) -> torch.Tensor:
    """Image-to-video: the cached SigLIP tokens; text-to-video: one zero token per sample (the pipeline passes 729,
    all zero: the transformer masks every one out, so their count changes nothing but the work)."""
    if "image_embeds" in batch:  # cached in fp32; the pipeline casts them to the transformer's dtype
        return batch["image_embeds"].to(like.dtype)
    return like.new_zeros(like.shape[0], 1, int(model.config.image_embed_dim))


class HunyuanVideo15Loss(DiffusionLoss):
    """``FamilySpec.loss``: the velocity MSE of one micro-batch."""

    def __init__(self, encoders, image_to_video: bool = False) -> None:
        super().__init__(encoders)
        self.image_to_video = image_to_video

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Noise and a timestep per clip, the velocity predicted from the 65-channel input, the weighted MSE."""
        latents, options = batch["latents"], cfg.family_options
        drawn = option_draw(options, latents, required(run_state(comps).flow_tables, "flow_tables"), generator)
        noisy = noisy_latents(latents, drawn.noise, drawn.sigmas)
        cond, mask = condition_channels(latents, self.image_to_video)
        text = padded_prompt(batch)
        pred = model(
            hidden_states=torch.cat([noisy, cond, mask], dim=1),
            timestep=drawn.timesteps,
            encoder_hidden_states=text["prompt_embeds"],
            encoder_attention_mask=text["prompt_embeds_mask"],
            encoder_hidden_states_2=text["prompt_embeds_2"],
            encoder_attention_mask_2=text["prompt_embeds_mask_2"],
            image_embeds=image_tokens(comps.model, batch, text["prompt_embeds"]),
            return_dict=False,
        )[0]
        target = velocity_target(latents, drawn.noise)
        return weighted_mse(pred, target, loss_weighting(options.weighting_scheme, drawn.sigmas))
