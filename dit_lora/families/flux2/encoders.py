"""FLUX.2's encoders: images through ``AutoencoderKLFlux2`` into patchified latents normalised by the VAE's batch-norm
statistics, captions through the pipeline's own ``encode_prompt`` (chosen hidden layers of Mistral-3 or Qwen3
stacked), exactly as ``Flux2Pipeline`` / ``Flux2KleinPipeline`` compute them."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.flux2.state import run_state
from dit_lora.kit.adapter import diffusers_class
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.prompts import CaptionLength, text_pipeline
from dit_lora.kit.text_conditioned import LengthCaptions, encoder_identity

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: ``--max_sequence_length``, else both pipelines' default, 512 (every caption is padded to it; the transformer sees
#: no mask)
max_sequence_length = CaptionLength(512)


def default_out_layers(pipeline: str) -> tuple[int, ...]:
    """The pipeline's own ``encode_prompt`` default (dev: 10, 20, 30 of Mistral-3; klein: 9, 18, 27 of Qwen3)."""
    default = inspect.signature(diffusers_class(pipeline).encode_prompt).parameters["text_encoder_out_layers"].default
    return tuple(int(k) for k in default)


def out_layers(pipeline: str, num_hidden_layers: int) -> tuple[int, ...]:
    """The stacked layers: the pipeline's default, each clamped to the encoder's depth.

    Every published text encoder is deeper than its default's last layer (Mistral Small: 40, Qwen3-4B: 36,
    Qwen3-8B: 36), so real checkpoints get the default unchanged; only a reduced-depth copy (the tests' layouts,
    the demo) stacks its last layer in place of the missing ones, keeping the embedding width the transformer takes.
    """
    return tuple(min(k, num_hidden_layers) for k in default_out_layers(pipeline))


def text_depth(text_encoder) -> int:
    """The decoder layer count of a Mistral-3 (its ``text_config``) or Qwen3 text encoder."""
    config = text_encoder.config
    return int(getattr(config, "text_config", config).num_hidden_layers)


def latent_statistics(vae, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The VAE's batch-norm running mean and ``sqrt(var + eps)``, ``(1, C, 1, 1)`` on ``like``'s device and dtype."""
    mean = vae.bn.running_mean.view(1, -1, 1, 1).to(like.device, like.dtype)
    std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps).to(like.device, like.dtype)
    return mean, std


def normalise_latents(vae, latents: torch.Tensor) -> torch.Tensor:
    """VAE latents ``(B, C, H, W)`` patchified 2x2 and normalised by the VAE's batch-norm running statistics, as
    ``Flux2Pipeline._encode_vae_image`` and diffusers' FLUX.2 LoRA script do (``(x - mean) / sqrt(var + eps)``)."""
    from diffusers import Flux2Pipeline  # slow import: only when images are encoded

    patched = Flux2Pipeline._patchify_latents(latents)
    mean, std = latent_statistics(vae, patched)
    return (patched - mean) / std


class Flux2Encoders(LengthCaptions, DiffusionEncoders):
    """``FamilySpec.encoders``: the latent cache's encoders and how a run encodes captions (the caption length its
    only text setting, padded to as both pipelines do)."""

    caption_length = max_sequence_length

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp, revision, variant, text dtype, caption length and stacked layers."""
        state = comps.state if comps is not None else None
        layers: dict[str, Any] = {"out_layers": list(state.out_layers)} if state is not None else {}
        return encoder_identity(cfg, "flux2", max_sequence_length=max_sequence_length(cfg.data), **layers)

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        """Pixels through the VAE (fp32, the distribution's mode), patchified and normalised: ``(B, 4C, H/16, W/16)``."""
        vae = comps.encoders["vae"]
        with torch.no_grad():
            latents = vae.encode(pixel_values.to(vae.device, vae.dtype)).latent_dist.mode()
            return normalise_latents(vae, latents).float()

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through the pipeline's own ``encode_prompt`` (its chat template, padding to the run's length,
        the stacked layers); ``with_negative`` adds the empty caption's embedding (klein's CFG negative)."""
        state = run_state(comps)
        pipe = text_pipeline(comps, state.pipeline_class)
        kwargs = {
            "device": comps.encoders["text_encoder"].device,
            "max_sequence_length": max_sequence_length.recorded(state.text),
            "text_encoder_out_layers": state.out_layers,
        }
        with torch.no_grad():
            embeds, _ = pipe.encode_prompt(prompt=list(captions), **kwargs)
            out = {"prompt_embeds": embeds}
            if with_negative:
                out["negative_prompt_embeds"] = pipe.encode_prompt(prompt=[""] * len(captions), **kwargs)[0]
        return out
