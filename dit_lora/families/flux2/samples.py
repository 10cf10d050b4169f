"""FLUX.2's validation samples: from the in-memory transformer (cached prompt embeddings, the checkpoint's sampler
with the pipeline's own dynamic ``mu``) and from the stock pipeline with the saved adapter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.flux2.encoders import latent_statistics, max_sequence_length, out_layers, text_depth
from dit_lora.families.flux2.loss import unpack
from dit_lora.families.flux2.model import LATENT_STRIDE
from dit_lora.families.flux2.state import KLEIN_PIPELINE, run_state
from dit_lora.kit.adapter import diffusers_class
from dit_lora.kit.components import DiffusionSamples, vae_on
from dit_lora.kit.sampling import flow_sampler, square_images

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig, ValidationOptions


def call_kwargs(validation: ValidationOptions, num_images: int) -> dict[str, Any]:
    """What both pipelines are called with besides :func:`square_images`' size, steps and seed: the image count and
    the guidance (``validation``: the run's ``cfg.validation``)."""
    return {"num_images_per_prompt": num_images, "guidance_scale": validation.validation_guidance_scale}


def decode(pipe, vae, latents: torch.Tensor, height: int, width: int) -> list:
    """The pipeline's own decode of its ``output_type="latent"`` output, with the VAE in its own dtype.

    Both pipelines hand the VAE latents in the transformer's dtype, which a run's fp32 VAE (it encodes the training
    images in fp32) refuses under bf16. ``Flux2Pipeline`` returns the packed tokens (``(B, H*W, C)``): unpack, undo
    the batch-norm normalisation and unpatchify as it does; ``Flux2KleinPipeline`` has done that already
    (``(B, C, H, W)``). Then decode and postprocess.
    """
    if latents.ndim == 3:
        grid = unpack(latents, height // LATENT_STRIDE, width // LATENT_STRIDE).to(vae.dtype)
        mean, std = latent_statistics(vae, grid)
        latents = pipe._unpatchify_latents(grid * std + mean)
    image = vae.decode(latents.to(vae.dtype), return_dict=False)[0]
    return pipe.image_processor.postprocess(image, output_type="pil")


class Flux2Samples(DiffusionSamples):
    """``FamilySpec.samples``: ``Flux2Pipeline`` / ``Flux2KleinPipeline`` at ``--resolution``."""

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Images from the in-memory transformer and the validation prompt's embeddings (VAE moved in to decode);
        klein gets the empty caption's embedding as its CFG negative."""
        state = run_state(comps)
        device = next(model.parameters()).device
        with vae_on(comps, device) as vae:
            # Any: mypy takes diffusers' top-level classes for the dummy placeholders its __init__ imports first
            pipe: Any = diffusers_class(state.pipeline_class)(
                scheduler=flow_sampler(comps), vae=vae, text_encoder=None, tokenizer=None, transformer=model
            )
            pipe.set_progress_bar_config(disable=True)
            kwargs = {
                "prompt_embeds": cond["prompt_embeds"],
                **call_kwargs(cfg.validation, cfg.validation.num_validation_images),
            }
            if state.pipeline_class == KLEIN_PIPELINE:
                kwargs["negative_prompt_embeds"] = cond["negative_prompt_embeds"]
            # a tensor here
            packed: Any = square_images(pipe, cfg.data, cfg.validation, seed, device, output_type="latent", **kwargs)
            with torch.no_grad():
                return decode(pipe, vae, packed, cfg.data.resolution, cfg.data.resolution)

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """Images from the reloaded pipeline, its captions encoded as training encoded them."""
        layers = out_layers(type(pipe).__name__, text_depth(pipe.text_encoder))
        kwargs = {"max_sequence_length": max_sequence_length(cfg.data), "text_encoder_out_layers": layers}
        device = pipe.transformer.device
        call = call_kwargs(cfg.validation, num_images)
        return square_images(pipe, cfg.data, cfg.validation, seed, device, prompt=prompt, **kwargs, **call)
