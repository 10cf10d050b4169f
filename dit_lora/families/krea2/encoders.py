"""Krea 2's encoders: images through the Qwen-Image VAE into normalised latents (the kit's
``normalised_image_latents``: the posterior mode, ``(z - latents_mean) / latents_std``, as Krea2Pipeline undoes before
decoding), captions through ``Krea2Pipeline``'s own ``encode_prompt``: Qwen3-VL's hidden states at the tapped layers
stacked per token ``(B, L, layers, width)``, every caption padded in the middle of its chat template to the run's
caption length, and the boolean mask of its real tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.krea2.state import run_state, tapped_layers
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.latents import normalised_image_latents
from dit_lora.kit.prompts import CaptionLength
from dit_lora.kit.text_conditioned import encoder_identity
from dit_lora.modelfiles.pipeline_files import read_component_config

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: ``--max_sequence_length``, else Krea2Pipeline's default, 512 (every caption is padded to it)
max_sequence_length = CaptionLength(512)
#: Krea2Pipeline's ``prompt_template_encode_suffix``: appended after the padding, inside the caption length (its
#: system prefix, 34 tokens with Qwen's tokenizer, is tokenized beyond the length and dropped)
TEMPLATE_CLOSE = "<|im_end|>\n<|im_start|>assistant\n"


def text_pipeline(comps: Components) -> Any:
    """A ``Krea2Pipeline`` of the run's tokenizer and text encoder, tapping the checkpoint's layers."""
    from diffusers import Krea2Pipeline  # slow import: only when encoding

    return Krea2Pipeline(
        scheduler=None, vae=None, transformer=None, tokenizer=comps.encoders["tokenizer"],
        text_encoder=comps.encoders["text_encoder"], text_encoder_select_layers=run_state(comps).select_layers,
    )  # fmt: skip


class Krea2Encoders(DiffusionEncoders):
    """``FamilySpec.encoders``: the latent cache's encoders and how a run encodes captions."""

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's caption length (padded to it, as the pipeline does), its chat template's closing tokens inside
        it: the caption-length report counts them with each caption (the pipeline truncates the caption to make room
        for them)."""
        return TextSettings(max_sequence_length=max_sequence_length(cfg.data), prefix=TEMPLATE_CLOSE)

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp, revision, variant, text dtype, caption length and tapped layers."""
        if comps is not None:
            layers = run_state(comps).select_layers
        else:  # `dit-lora check`: the folder's, as loading reads them
            layers = tapped_layers(read_component_config(cfg.model, "", "model_index.json") or {})
        return encoder_identity(cfg, "krea2", max_sequence_length=max_sequence_length(cfg.data), layers=list(layers))

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        """``(B, 3, H, W)`` -> ``(B, C, H/8, W/8)`` normalised latents (fp32)."""
        return normalised_image_latents(comps.encoders["vae"], pixel_values)

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through ``Krea2Pipeline.encode_prompt``: ``prompt_embeds`` and the boolean ``prompt_embeds_mask``;
        ``with_negative`` adds the empty caption's (the pipeline's negative for its real CFG)."""
        pipe = text_pipeline(comps)
        kwargs = {
            "device": comps.encoders["text_encoder"].device,
            "max_sequence_length": max_sequence_length.recorded(run_state(comps).text),
        }
        with torch.no_grad():
            embeds, mask = pipe.encode_prompt(list(captions), **kwargs)
            out = {"prompt_embeds": embeds, "prompt_embeds_mask": mask}
            if with_negative:
                negative, negative_mask = pipe.encode_prompt([""] * len(captions), **kwargs)
                out.update(negative_prompt_embeds=negative, negative_prompt_embeds_mask=negative_mask)
        return out
