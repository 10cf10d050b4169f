"""LTX-2's memory plan: transformer, video VAE, Gemma-3, audio VAE and text connectors on the meta device; clips of
the worst bucket with their sound and the connectors' caption embeddings."""

from __future__ import annotations

from typing import Any, cast

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.ltx2.encoders import FPS, REFERENCE, max_sequence_length
from dit_lora.families.ltx2.info import TRAINED, LTX2Task
from dit_lora.families.ltx2.model import PARTS, make_components
from dit_lora.families.ltx2.state import run_state
from dit_lora.kit.clip_audio import LATENTS, MASK
from dit_lora.kit.components import DiffusionPlan
from dit_lora.kit.loader import plan_parts
from dit_lora.kit.video_sizes import ClipPlan
from dit_lora.plan.fake import diffusers_on_meta


class LTX2Plan(ClipPlan, DiffusionPlan):
    """``FamilySpec.plan``: the loaded parts on the meta device; clips of the worst bucket and their sound."""

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What :meth:`LTX2Model.load_components` loads, from the configs ``read`` returns."""
        from diffusers import AutoencoderKLLTX2Audio
        from diffusers.pipelines.ltx2 import LTX2TextConnectors

        loaded = plan_parts(PARTS, cfg, read, depth)
        extra = {
            "audio_vae": diffusers_on_meta(AutoencoderKLLTX2Audio, read("audio_vae", "config.json"), torch.float32),
            "connectors": diffusers_on_meta(LTX2TextConnectors, read("connectors", "config.json"), cfg.weight_dtype),
        }
        comps = make_components(
            cfg, loaded.transformer, loaded.vae, loaded.text_encoder, extra, loaded.scheduler_config, None
        )
        comps.state.text = max_sequence_length.settings(cfg.data)
        return comps

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, Any]:
        """The connectors' caption embeddings at the run's caption length, their mask, the clips' frame rate and,
        with ``--audio on``, the sound of the longest span the worst bucket's frames cover at the model's rate."""
        state = run_state(comps)
        length = max_sequence_length(cfg.data)
        fps = float(TRAINED["fps"])  # the pipeline's rate: the plan's clips are the default size's
        connectors = comps.encoders["connectors"].config
        video = connectors.video_connector_num_attention_heads * connectors.video_connector_attention_head_dim
        audio = connectors.audio_connector_num_attention_heads * connectors.audio_connector_attention_head_dim
        out = {
            "prompt_embeds": torch.empty(batch_size, length, video, dtype=cfg.weight_dtype),
            "audio_prompt_embeds": torch.empty(batch_size, length, audio, dtype=cfg.weight_dtype),
            "prompt_attention_mask": torch.ones(batch_size, length, dtype=torch.long),
            FPS: torch.full((batch_size,), fps),
            "fps": fps,
        }
        if state.with_audio and state.audio is not None:
            frames = max(b[0] for b in self.task.video_buckets(cfg))
            steps = state.audio.latent_frames(frames / fps)
            out[LATENTS] = torch.empty(batch_size, steps, state.audio_width)
            out[MASK] = torch.ones(batch_size, steps)
        return out


class LTX2ICPlan(LTX2Plan):
    """``FamilySpec.plan``: text-to-video's, each clip with a reference latent of its bucket / the factor."""

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, Any]:
        """Text-to-video's conditioning and the worst bucket's reference latents."""
        out = super().plan_conditioning(comps, cfg, batch_size)
        info = cast(LTX2Task, self.task).info(cfg.model)
        factor = cfg.family_options.reference_downscale_factor
        frames, height, width = max(self.task.video_buckets(cfg), key=lambda b: b[0] * b[1] * b[2])
        latent = ((frames - 1) // info.vae_temporal + 1, height // factor // info.vae_spatial)
        out[REFERENCE] = torch.empty(batch_size, info.z_dim, latent[0], latent[1], width // factor // info.vae_spatial)
        return out
