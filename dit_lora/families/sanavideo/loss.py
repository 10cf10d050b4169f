"""SANA-Video's loss (its data path: the kit's clips, :class:`~dit_lora.kit.video_sizes.ClipData`).

The loss is NVlabs' SANA-Video trainer's (``configs/sana_video_config/Sana_2000M_480px_AdamW_fsdp.yaml``:
``predict_flow_v``, ``linear_flow``, ``flow_shift`` 3.0, ``weighting_scheme: logit_normal`` with mean 0 and std 1;
``train_video_scripts/train_video_ivjoint.py`` draws ``u`` with diffusers' ``compute_density_for_timestep_sampling``
and trains at ``t = floor(u * 1000)``)
computed with diffusers' training pieces (:mod:`dit_lora.modeling.flow_matching`, as its Sana DreamBooth script):
``sigma`` from the shifted ``FlowMatchEulerDiscreteScheduler`` table at ``floor(u * 1000)``, ``u`` logit-normal,
``x_t = (1 - sigma) x0 + sigma eps``, timestep ``1000 sigma``, target ``eps - x0`` (the velocity the pipelines'
flow-prediction samplers integrate), MSE in fp32 weighted per ``--weighting_scheme`` (1 for logit_normal).

Image-to-video is ``SanaImageToVideoPipeline``'s denoising step: the first latent frame is the clean latent of the
first frame (the Wan VAE is causal in time, so the clip's own first latent frame is the image's), its tokens get
timestep 0 (``timestep * (1 - conditioning_mask)`` per token), and it is left out of the loss, as the pipeline
steps only frames ``1:``.
"""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.sanavideo.state import required, run_state
from dit_lora.kit.components import DiffusionLoss
from dit_lora.modeling.flow_matching import loss_weighting, noisy_latents, option_draw, velocity_target, weighted_mse


def first_frame_timesteps(timesteps: torch.Tensor, latents: torch.Tensor, patch: tuple[int, int, int]) -> torch.Tensor:
    """Per-token timesteps ``(B, 1, F'/p_t, h/p_h, w/p_w)``: each sample's timestep, 0 on the first latent frame's
    tokens (``SanaImageToVideoPipeline``: ``t.expand(conditioning_mask.shape) * (1 - conditioning_mask)``)."""
    bsz, _, frames, height, width = latents.shape
    p_t, p_h, p_w = patch
    mask = latents.new_zeros(bsz, 1, frames // p_t, height // p_h, width // p_w, dtype=timesteps.dtype)
    mask[:, :, 0] = 1.0
    return timesteps.view(-1, 1, 1, 1, 1) * (1 - mask)


def model_patch(model: Any) -> tuple[int, int, int]:
    """The transformer's ``patch_size`` ``(p_t, p_h, p_w)`` (untyped: a diffusers config holds its keys as
    attributes)."""
    p_t, p_h, p_w = model.config.patch_size
    return int(p_t), int(p_h), int(p_w)


class SanaVideoLoss(DiffusionLoss):
    """``FamilySpec.loss``: the velocity MSE of one micro-batch (image-to-video: the first frame given clean)."""

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
        """Noise and a logit-normal timestep per clip, the velocity predicted, the weighted MSE against it."""
        latents, options = batch["latents"], cfg.family_options
        drawn = option_draw(options, latents, required(run_state(comps).flow_tables, "flow_tables"), generator)
        noisy = noisy_latents(latents, drawn.noise, drawn.sigmas)
        target = velocity_target(latents, drawn.noise)
        timestep: torch.Tensor = drawn.timesteps
        if self.image_to_video:
            noisy = torch.cat([latents[:, :, :1], noisy[:, :, 1:]], dim=2)
            timestep = first_frame_timesteps(timestep, latents, model_patch(comps.model))
        pred = model(
            hidden_states=noisy,
            encoder_hidden_states=batch["prompt_embeds"],
            encoder_attention_mask=batch["prompt_attention_mask"],
            timestep=timestep,
            return_dict=False,
        )[0]
        if self.image_to_video:  # the pipeline never steps the conditioning frame: it teaches nothing
            pred, target = pred[:, :, 1:], target[:, :, 1:]
        return weighted_mse(pred, target, loss_weighting(options.weighting_scheme, drawn.sigmas))
