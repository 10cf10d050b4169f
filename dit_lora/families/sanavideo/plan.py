"""SANA-Video's memory plan: transformer, Wan VAE and Gemma-2 on the meta device, clips of the worst bucket."""

from __future__ import annotations

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.sanavideo.encoders import max_sequence_length
from dit_lora.families.sanavideo.model import make_components
from dit_lora.kit.caption_plan import caption_embeddings
from dit_lora.kit.components import DiffusionPlan
from dit_lora.kit.video_sizes import ClipPlan
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth


class SanaVideoPlan(ClipPlan, DiffusionPlan):
    """``FamilySpec.plan``: transformer, Wan VAE and Gemma-2 on the meta device; clips of the worst bucket."""

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What :meth:`SanaVideoModel.load_components` loads, from the configs ``read`` returns."""
        from diffusers import AutoencoderKLWan, SanaVideoTransformer3DModel

        dtype = cfg.weight_dtype
        transformer = diffusers_on_meta(
            SanaVideoTransformer3DModel, with_depth(read("transformer", "config.json"), "num_layers", depth), dtype
        )
        vae = diffusers_on_meta(AutoencoderKLWan, read("vae", "config.json"), torch.float32)
        text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype)
        comps = make_components(
            cfg, transformer, vae, text_encoder, read("scheduler", "scheduler_config.json") or {}, None
        )
        comps.state.text = TextSettings(max_sequence_length=max_sequence_length(cfg.data))
        return comps

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """Gemma-2 embeddings of the run's caption length and their mask, as empty tensors (the kit's :func:`caption_embeddings`)."""
        return caption_embeddings(comps, cfg.weight_dtype, batch_size, "prompt_attention_mask")
