"""Wan's loss: rectified flow on the checkpoint's shifted schedule (see :mod:`.spec`), each A14B expert on its own
part of the table, TI2V-5B's per-token timesteps and clean first frame in image mode (its data path: the kit's clips,
:class:`~dit_lora.kit.video_sizes.ClipData`)."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.wan.experts import WanExperts, expert_for_step, transformer_config
from dit_lora.families.wan.state import required, run_state
from dit_lora.kit.components import DiffusionLoss
from dit_lora.modeling.flow_matching import noisy_latents, sampling_draw, velocity_target


class WanLoss(DiffusionLoss):
    """``FamilySpec.loss``: ``eps - x0`` predicted from ``(1 - sigma) x0 + sigma eps``, plain MSE in fp32."""

    def step_expert(self, comps: Components, batch: dict[str, Any]) -> str | None:
        """The expert this batch trains: the run's single one, or by step number for ``both`` (host-side)."""
        expert = run_state(comps).expert
        return expert_for_step(batch.get("step")) if expert == "both" else expert

    def draw_timesteps(
        self, comps: Components, latents: torch.Tensor, expert: str | None, generator: torch.Generator, cfg: TrainConfig
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(noise, sigmas [B], timesteps [B])``: noise first, then one table entry per sample from the expert's
        part of the schedule (all of it for single-expert checkpoints), all drawn on the device."""
        state = run_state(comps)
        tables, span = required(state.flow_tables, "flow_tables"), state.index_ranges[expert or "all"]
        drawn = sampling_draw(cfg.family_options, latents, tables, generator, span)
        return drawn.noise, drawn.sigmas, drawn.timesteps

    def model_inputs(
        self,
        comps: Components,
        batch: dict[str, Any],
        noisy: torch.Tensor,
        latents: torch.Tensor,
        timesteps: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[dict[str, Any], torch.Tensor | None]:
        """The transformer's inputs besides the text, and the loss mask (None: every element counts).

        TI2V-5B: per-token timesteps; image-mode samples get the clean first latent frame and timestep 0 there,
        and that frame is left out of the loss (``WanImageToVideoPipeline`` with ``expand_timesteps``).
        """
        state = run_state(comps)
        if not state.expand_timesteps:
            return {"hidden_states": noisy, "timestep": timesteps}, None
        bsz, _, frames, height, width = latents.shape
        p = float(state.image_probability)
        draw = torch.rand(bsz, generator=generator, device=latents.device)  # always drawn: same RNG stream either way
        image_mode = (draw < p).to(latents.dtype).view(-1, 1, 1, 1, 1)
        mask = torch.ones(bsz, 1, frames, height, width, device=latents.device, dtype=latents.dtype)
        mask[:, :, :1] = 1.0 - image_mode[:, :, :1]
        hidden = (1.0 - mask) * latents + mask * noisy
        p_h, p_w = transformer_config(comps.model).patch_size[1:]
        per_token = (mask[:, 0, :, ::p_h, ::p_w] * timesteps.view(-1, 1, 1, 1)).flatten(1)
        return {"hidden_states": hidden, "timestep": per_token}, mask

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """The velocity MSE of one micro-batch (masked where TI2V's image mode keeps the first frame clean)."""
        latents = batch["latents"]
        expert = self.step_expert(comps, batch)
        denoiser = model.activate(required(expert, "expert")) if isinstance(model, WanExperts) else model
        noise, sigmas, timesteps = self.draw_timesteps(comps, latents, expert, generator, cfg)
        noisy = noisy_latents(latents, noise, sigmas)
        inputs, mask = self.model_inputs(comps, batch, noisy, latents, timesteps, generator)
        pred = denoiser(
            encoder_hidden_states=batch["prompt_embeds"],
            return_dict=False,
            **self.conditioning(comps, batch, inputs, generator),
        )[0]
        err = (pred.float() - velocity_target(latents, noise).float()) ** 2
        if mask is None:
            return err.mean()
        weight = mask.expand_as(err)
        return (err * weight).sum() / weight.sum().clamp(min=1.0)

    def conditioning(
        self, comps: Components, batch: dict[str, Any], inputs: dict[str, Any], generator: torch.Generator
    ) -> dict[str, Any]:
        """The transformer's keyword inputs besides the text (image-to-video adds the image condition)."""
        return inputs
