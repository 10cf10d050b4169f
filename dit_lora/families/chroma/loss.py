"""Chroma's loss: the kit's rectified flow (:mod:`~dit_lora.kit.guided_flow`; Chroma's transformer has
no guidance embedding, so none is fed) on the latents packed 2x2 into tokens as FLUX.1's, with the caption's boolean
mask extended over the image tokens as ``ChromaPipeline._prepare_attention_mask`` extends it; ``--chroma_shift``
fixes the shift (uniform ``--weighting_scheme none`` by default).

The mask reaches the checkpointed single blocks through ``model.py``'s :class:`ChromaTrainables` (diffusers' own
checkpointing calls them without it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.data.text_padding import cut_text_padding
from dit_lora.families.chroma.state import ChromaRun
from dit_lora.kit.components import DiffusionLoss
from dit_lora.kit.guided_flow import GuidedFlowLoss
from dit_lora.kit.packed import latent_ids, pack, unpack

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def transformer_mask(caption_mask: torch.Tensor, image_tokens: int) -> torch.Tensor:
    """The caption's boolean mask followed by one ``True`` per image token (``ChromaPipeline._prepare_attention_mask``
    with a boolean mask)."""
    ones = torch.ones(caption_mask.shape[0], image_tokens, dtype=torch.bool, device=caption_mask.device)
    return torch.cat([caption_mask.to(torch.bool), ones], dim=1)


class ChromaLoss(GuidedFlowLoss, DiffusionLoss):
    """``FamilySpec.loss``: the kit's flow loss through Chroma's transformer, each batch's captions cut to the tokens
    the cached captions use (``--trim_text_padding``; exact: the cut tokens are masked as keys for every token, and
    every text token's position id is zero)."""

    state, shift_option, guidance_option = ChromaRun, "chroma_shift", ""

    def compute_loss(self, comps: Components, model, batch: dict[str, Any], generator, cfg: TrainConfig):
        """The kit's loss on the batch with its caption padding cut."""
        cut = cut_text_padding(batch["prompt_embeds"], batch["prompt_attention_mask"], self.state.of(comps).text_tokens)
        trimmed = {**batch, "prompt_embeds": cut[0], "prompt_attention_mask": cut[1]}
        return super().compute_loss(comps, model, trimmed, generator, cfg)

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
