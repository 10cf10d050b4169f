"""Chroma's loss: the kit's rectified flow (:mod:`~dit_lora.families.diffusion.guided_flow`; Chroma's transformer has
no guidance embedding, so none is fed) on the latents packed 2x2 into tokens as FLUX.1's, with the caption's boolean
mask extended over the image tokens as ``ChromaPipeline._prepare_attention_mask`` extends it; ``--chroma_shift``
fixes the shift (uniform ``--weighting_scheme none`` by default).

Activation checkpointing: diffusers' ``ChromaTransformer2DModel.forward`` calls its checkpointed single blocks
without the attention mask (the mask reaches them only when they run unchecked), so a run with checkpointing on would
train another model than one without. :class:`ChromaTrainables` checkpoints through a function that hands the single
blocks the mask the model was called with."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch.utils.checkpoint import checkpoint

from dit_lora.families.chroma.state import ChromaRun
from dit_lora.families.diffusion.components import DiffusionTrainables
from dit_lora.families.diffusion.guided_flow import GuidedFlowLoss
from dit_lora.families.diffusion.packed import latent_ids, pack, unpack


def transformer_mask(caption_mask: torch.Tensor, image_tokens: int) -> torch.Tensor:
    """The caption's boolean mask followed by one ``True`` per image token (``ChromaPipeline._prepare_attention_mask``
    with a boolean mask)."""
    ones = torch.ones(caption_mask.shape[0], image_tokens, dtype=torch.bool, device=caption_mask.device)
    return torch.cat([caption_mask.to(torch.bool), ones], dim=1)


class ChromaLoss(GuidedFlowLoss):
    """``FamilySpec.loss``: the kit's flow loss through Chroma's transformer."""

    state, shift_option, guidance_option = ChromaRun, "chroma_shift", ""

    def image_tokens(self, latents: torch.Tensor) -> int:
        """One token per 2x2 patch."""
        return (latents.shape[-2] // 2) * (latents.shape[-1] // 2)

    def predict(self, model, noisy: torch.Tensor, sigmas: torch.Tensor, guidance, batch: dict[str, Any]):
        """The packed tokens, T5's embeddings, the caption mask over caption and image tokens, the ids; the
        prediction unpacked."""
        embeds, (height, width) = batch["prompt_embeds"], noisy.shape[-2:]
        tokens = pack(noisy)
        pred = model(
            hidden_states=tokens,
            encoder_hidden_states=embeds,
            timestep=sigmas,
            txt_ids=torch.zeros(embeds.shape[1], 3, device=noisy.device, dtype=embeds.dtype),
            img_ids=latent_ids(height // 2, width // 2, noisy.device, embeds.dtype),
            attention_mask=transformer_mask(batch["prompt_attention_mask"], tokens.shape[1]),
            return_dict=False,
        )[0]
        return unpack(pred, height, width)


class ChromaTrainables(DiffusionTrainables):
    """``FamilySpec.trainables``: the kit's, checkpointing so that every block sees the attention mask."""

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """Diffusers' switch with a checkpoint function that passes the single blocks the mask the model's forward
        was called with (a forward pre-hook holds it for the step)."""
        from diffusers.models.transformers.transformer_chroma import ChromaSingleTransformerBlock

        held: dict[str, torch.Tensor | None] = {"mask": None}

        def hold_mask(module, args, kwargs) -> None:
            held["mask"] = kwargs.get("attention_mask")

        def checkpointed(block, *args):
            # diffusers calls a checkpointed single block with (hidden_states, temb, rotary): the mask is next
            if isinstance(block, ChromaSingleTransformerBlock) and len(args) == 3:
                args = (*args, held["mask"])
            return checkpoint(block.__call__, *args, use_reentrant=False)

        model.register_forward_pre_hook(hold_mask, with_kwargs=True)
        cast(Any, model).enable_gradient_checkpointing(checkpointed)  # a diffusers ModelMixin's method
