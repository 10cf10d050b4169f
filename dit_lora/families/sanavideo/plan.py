"""SANA-Video's memory plan: transformer, Wan VAE and Gemma-2 on the meta device, clips of the worst bucket."""

from __future__ import annotations

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.diffusion.video_sizes import clip_batches
from dit_lora.families.sanavideo.encoders import TEXT_LEN
from dit_lora.families.sanavideo.info import SanaVideoTask
from dit_lora.families.sanavideo.model import make_components
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth


class SanaVideoPlan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, Wan VAE and Gemma-2 on the meta device; clips of the worst bucket."""

    def __init__(self, task: SanaVideoTask, encoders, loss) -> None:
        super().__init__(encoders, loss)
        self.task = task

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
        comps.state.text = TextSettings(max_sequence_length=TEXT_LEN)
        return comps

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """Gemma-2 embeddings of 300 tokens and their mask, as empty tensors."""
        width = comps.encoders["text_encoder"].config.hidden_size
        return {
            "prompt_embeds": torch.empty(batch_size, TEXT_LEN, width, dtype=cfg.weight_dtype),
            "prompt_attention_mask": torch.ones(batch_size, TEXT_LEN, dtype=torch.long),
        }

    def pixel_batches(self, cfg: TrainConfig) -> list[tuple[str, tuple[int, ...]]]:
        """:func:`~dit_lora.families.diffusion.video_sizes.clip_batches` of the run's buckets."""
        return clip_batches(cfg, self.task.video_buckets(cfg))
