"""Black Forest Labs' packed latents, as diffusers' ``FluxPipeline`` lays them out and the families whose transformer
takes them share (FLUX.1, Chroma): an image VAE's latents cut into 2 x 2 patches, one token a patch, each token's
channels ordered ``(C, ph, pw)``, with ``(0, h, w)`` position ids, the decode of the pipelines' packed
``output_type="latent"`` tokens and the validation samples through them (:func:`packed_samples`), and diffusers'
default LoRA targets of these transformers (:data:`LORA_LAYERS`). :data:`LATENT_STRIDE` and :func:`check_resolution`
say which sizes they take."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.kit.builder import AnyAspect, check_divisible
from dit_lora.kit.components import vae_on
from dit_lora.kit.loader import model_class
from dit_lora.kit.sampling import flow_sampler, square_images

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, ValidationOptions

#: pixels per token side: the VAE's 8x times the 2 x 2 packing (the pipelines take sizes divisible by 16)
LATENT_STRIDE = 16
#: ``FamilySpec.image_buckets``: any aspect ratio (RoPE position ids, no positional table), in the latent stride
BUCKETS = AnyAspect(LATENT_STRIDE)
#: ``FamilyInfo.default_lora_layers`` of these transformers: diffusers' train_dreambooth_lora_flux.py default (the
#: double blocks' attention and feed-forwards; the single blocks get LoRA on their attn.to_q/k/v, whose names they
#: share); FLUX.1's and Chroma's blocks have the same module names
LORA_LAYERS = (
    "to_k",
    "to_q",
    "to_v",
    "to_out.0",
    "add_k_proj",
    "add_q_proj",
    "add_v_proj",
    "to_add_out",
    "ff.net.0.proj",
    "ff.net.2",
    "ff_context.net.0.proj",
    "ff_context.net.2",
)


def check_resolution(resolution: int, kind: str, pipeline: str) -> None:
    """Refuse a ``--resolution`` that is not a multiple of the latent stride, naming the nearest that are (``kind``:
    the model as messages name it, ``pipeline``: its pipeline class)."""
    why = (
        f"{kind}'s latents are 8x smaller than the image and packed in 2x2 patches, and {pipeline} takes only sizes "
        f"divisible by {LATENT_STRIDE} (see --resolution)"
    )
    check_divisible(resolution, LATENT_STRIDE, why)


def pack(latents: torch.Tensor) -> torch.Tensor:
    """``FluxPipeline._pack_latents``: ``(B, C, H, W) -> (B, H/2 * W/2, C*4)``, each token's channels ``(C, ph, pw)``."""
    b, c, h, w = latents.shape
    return latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2), c * 4)


def unpack(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The inverse of :func:`pack` for a ``height x width`` latent grid (``FluxPipeline._unpack_latents``)."""
    b, _, channels = tokens.shape
    grid = tokens.view(b, height // 2, width // 2, channels // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return grid.reshape(b, channels // 4, height, width)


def latent_ids(height: int, width: int, device, dtype: torch.dtype, index: int = 0) -> torch.Tensor:
    """``FluxPipeline._prepare_latent_image_ids`` of a ``height x width`` token grid, ``(H*W, 3)`` rows
    ``(index, h, w)`` (``index`` 1: ``FluxKontextPipeline``'s control image), built on ``device`` (the pipeline builds
    them on the host and copies them: a host copy per step)."""
    first = torch.full((1,), index, dtype=torch.long, device=device)
    grid = torch.cartesian_prod(first, torch.arange(height, device=device), torch.arange(width, device=device))
    return grid.to(dtype)


def decode_packed(pipe, vae, tokens: torch.Tensor, height: int, width: int) -> list:
    """A pipeline's own decode of its packed ``output_type="latent"`` tokens of a ``height x width`` px image, with the
    VAE in its own dtype (the pipelines hand it latents in the transformer's dtype, which a run's fp32 VAE refuses
    under bf16): unpack, undo the VAE's scale and shift, decode, postprocess to PIL images."""
    grid = unpack(tokens, height // LATENT_STRIDE * 2, width // LATENT_STRIDE * 2).to(vae.dtype)
    latents = grid / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
    with torch.no_grad():
        return pipe.image_processor.postprocess(vae.decode(latents, return_dict=False)[0], output_type="pil")


def packed_samples(
    comps,
    model: torch.nn.Module,
    pipeline: str,
    cond: dict[str, Any],
    data: DataOptions,
    validation: ValidationOptions,
    seed: int,
    *,
    keys: tuple[str, ...],
    text_parts: tuple[str, ...] = ("text_encoder", "tokenizer"),
    **call: Any,
) -> list:
    """Validation images from the in-memory transformer through ``pipeline`` (its diffusers class name, built with the
    checkpoint's sampler and without its ``text_parts``): the cached conditioning ``keys`` each repeated per image
    (the pipeline repeats only what it encodes itself), the validation guidance scale, the packed latents decoded by
    :func:`decode_packed` with the VAE moved in; ``call``: the pipeline call's other arguments (Kontext's image);
    ``data``, ``validation``: the run's ``cfg.data`` and ``cfg.validation``."""
    device, copies = next(model.parameters()).device, validation.num_validation_images
    with vae_on(comps, device) as vae:
        pipe: Any = model_class("diffusers", pipeline)(
            scheduler=flow_sampler(comps), vae=vae, transformer=model, **dict.fromkeys(text_parts)
        )
        pipe.set_progress_bar_config(disable=True)
        embeds = {k: cond[k].to(device).repeat_interleave(copies, 0) for k in keys}
        guidance = validation.validation_guidance_scale
        tokens: Any = square_images(
            pipe, data, validation, seed, device, output_type="latent", guidance_scale=guidance, **embeds, **call
        )
        return decode_packed(pipe, vae, tokens, data.resolution, data.resolution)
