"""Qwen-Image's memory plan: its components from their configs on the meta device and the cached text conditioning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.qwenimage.encoders import max_sequence_length
from dit_lora.families.qwenimage.state import QwenImageRun
from dit_lora.kit.components import DiffusionPlan
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig


class QwenImagePlan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and Qwen2.5-VL on the meta device; caption embeddings at the run's text
    length. An Edit model is planned with one control image per sample at the sample's size (its latent tokens
    appended, the text longer by the image's tokens: the bucket's for Edit, a 384 x 384 area's for Edit-Plus)."""

    def __init__(self, encoders, loss, buckets=None, edit: str | None = None) -> None:
        super().__init__(encoders, loss, buckets)
        self.edit = edit

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What :meth:`QwenImageModel.load_components <dit_lora.families.qwenimage.model.QwenImageModel.load_components>`
        loads, built from the configs ``read`` returns (``depth``: that many transformer blocks)."""
        from diffusers import AutoencoderKLQwenImage, QwenImageTransformer2DModel  # heavy: only when a plan is made
        from transformers import Qwen2_5_VLForConditionalGeneration

        dtype = cfg.weight_dtype
        transformer = diffusers_on_meta(
            QwenImageTransformer2DModel, with_depth(read("transformer", "config.json"), "num_layers", depth), dtype
        )
        vae_config = read("vae", "config.json")
        vae = diffusers_on_meta(AutoencoderKLQwenImage, vae_config, torch.float32)
        text_encoder = transformers_on_meta(
            read("text_encoder", "config.json"), dtype, Qwen2_5_VLForConditionalGeneration
        )
        scheduler_config = read("scheduler", "scheduler_config.json") or {}
        state = QwenImageRun(
            scheduler_config=dict(scheduler_config),
            text=max_sequence_length.settings(cfg.data),
            latents_mean=tuple(vae_config.get("latents_mean", ())),
            latents_std=tuple(vae_config.get("latents_std", ())),
        )
        return Components(
            model=transformer, scheduler=None, encoders={"vae": vae, "text_encoder": text_encoder}, state=state
        )

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """Text-to-image's batches; an Edit model's with one control latent like the target's."""
        batches = super().plan_batches(cfg, comps)
        if self.edit is not None:
            for _, batch in batches:
                batch["control_latents"] = torch.empty_like(batch["latents"])[:, None]
        return batches

    def image_text_tokens(self, data: DataOptions) -> int:
        """The text tokens one control image adds (a 28 x 28 pixel patch group each, as Qwen2.5-VL merges them; an
        Edit model's at ``data.resolution``, the run's ``cfg.data``)."""
        if self.edit is None:
            return 0
        side = 384 if self.edit == "edit_plus" else data.resolution
        return (side // 28) ** 2

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """Caption embeddings and their mask at the run's text length (plus an edit control image's), as empty
        tensors."""
        length = comps.state.text.max_sequence_length + self.image_text_tokens(cfg.data)
        model: Any = comps.model  # a QwenImageTransformer2DModel: its config is diffusers' FrozenDict
        width = int(model.config.joint_attention_dim)
        return {
            "prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype),
            "prompt_embeds_mask": torch.ones(batch_size, length, dtype=torch.long),
        }
