"""Qwen-Image's encoders: images through ``AutoencoderKLQwenImage`` (fp32, the posterior mode normalised with the VAE's
``latents_mean``/``latents_std`` as the pipelines do), captions through ``QwenImagePipeline.encode_prompt`` (the
pipeline's own prompt template and drop index), padded to the run's text length with their mask; the run's text
settings recorded in its :class:`~dit_lora.families.qwenimage.state.QwenImageRun`."""

from __future__ import annotations

import torch

from dit_lora.contract.family import Components
from dit_lora.families.qwenimage.state import run_state
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.prompts import CaptionLength, text_pipeline
from dit_lora.kit.text_conditioned import LengthCaptions, TextSettingsSetup

#: ``--max_sequence_length``, else QwenImagePipeline.__call__'s default, 512
max_sequence_length = CaptionLength(512)
#: QwenImagePipeline.check_inputs: "`max_sequence_length` cannot be greater than 1024"
MAX_SEQUENCE_LENGTH = 1024
#: the negative prompt of the validation samples (Qwen-Image's model card: " " turns classifier-free guidance on)
NEGATIVE_PROMPT = " "


def pad_text(embeds: torch.Tensor, mask: torch.Tensor | None, length: int) -> dict[str, torch.Tensor]:
    """``embeds`` (B, l, D) zero-padded to ``length`` tokens with its mask (B, length), 1 on real tokens: every
    sample of the cache then stacks with every other (the pad is masked out of the joint attention)."""
    batch, tokens, width = embeds.shape
    if mask is None:
        mask = torch.ones(batch, tokens, dtype=torch.long, device=embeds.device)
    padded = embeds.new_zeros(batch, length, width)
    padded[:, :tokens] = embeds[:, :length]
    full = torch.zeros(batch, length, dtype=torch.long, device=embeds.device)
    full[:, :tokens] = mask[:, :length].long()
    return {"prompt_embeds": padded, "prompt_embeds_mask": full}


class QwenImageEncoders(LengthCaptions, DiffusionEncoders):
    """``FamilySpec.encoders``: latents of the image and Qwen2.5-VL caption embeddings (the caption length their only
    text setting: the template is the pipeline's own)."""

    caption_length = max_sequence_length
    identity_family = "qwenimage"
    stamp_key = "model_stamp"
    identity_extra = (("latents", "posterior_mode_normalised_fp32"),)

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        """``(B, 3, H, W)`` in [-1, 1] -> ``(B, C, H/8, W/8)`` normalised latents (fp32): the posterior mode, as the
        Edit pipelines encode their images (``sample_mode="argmax"``), so the cache is deterministic."""
        vae = comps.encoders["vae"]
        video = pixel_values.to(vae.device, vae.dtype).unsqueeze(2)  # one frame: (B, 3, 1, H, W)
        with torch.no_grad():
            latents = vae.encode(video).latent_dist.mode().float()[:, :, 0]
        state = run_state(comps)
        mean = torch.tensor(state.latents_mean or vae.config.latents_mean, device=latents.device).view(1, -1, 1, 1)
        std = torch.tensor(state.latents_std or vae.config.latents_std, device=latents.device).view(1, -1, 1, 1)
        return (latents - mean) / std

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through ``QwenImagePipeline.encode_prompt``, padded to the run's text length (and the negative,
        ``" "``, on request)."""
        length = max_sequence_length.recorded(run_state(comps).text)
        pipe = text_pipeline(comps, "QwenImagePipeline")
        device = comps.encoders["text_encoder"].device
        with torch.no_grad():
            embeds, mask = pipe.encode_prompt(list(captions), device=device, max_sequence_length=length)
            out = pad_text(embeds, mask, length)
            if with_negative:
                embeds, mask = pipe.encode_prompt([NEGATIVE_PROMPT], device=device, max_sequence_length=length)
                neg = pad_text(embeds, mask, length)
                out.update({f"negative_{k}": v for k, v in neg.items()})
        return out


class QwenImageSetup(TextSettingsSetup):
    """``FamilySpec.setup``: the run's text settings recorded once the components load."""

    run_state = staticmethod(run_state)
