"""CogVideoX's encoders: clips through the 3D VAE (the posterior mean, scaled) and prompts through the pipeline's own
T5 ``encode_prompt``, padded to the transformer's text length; what changes the cached latents."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.contract.spec import FamilyInfo
from dit_lora.families.cogvideox.info import FAMILY_FOR, CogVideoXVideo, check_latent_size, transformer_config
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.latents import model_identity
from dit_lora.kit.prompts import pipeline_prompts

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def pipeline_class(info: FamilyInfo):
    """The family's diffusers pipeline class (``CogVideoXPipeline`` or ``CogVideoXImageToVideoPipeline``)."""
    import diffusers  # slow: only when a pipeline is built

    return getattr(diffusers, info.pipeline_class_name)


class CogVideoXEncoders(DiffusionEncoders):
    """``FamilySpec.encoders``: clip latents ``(B, F', C, h, w)`` and T5 prompt embeddings (text-to-video)."""

    #: ``"t2v"`` here; the image-to-video encoders (``i2v.py``) also cache the first frame
    task = "t2v"

    def __init__(self, info: FamilyInfo, video: CogVideoXVideo) -> None:
        self.info, self.video = info, video

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp, revision, variant, dtype, text length, the VAE's tiling/slicing and the latents kept."""
        return {
            "family": FAMILY_FOR[self.task],
            "cogvideox_variant": self.task,  # the stored key keeps its name: existing caches stay valid
            **model_identity(cfg),
            "dtype": cfg.training.mixed_precision,  # VAE and T5 run in it
            "max_sequence_length": self.video.model_info(cfg.model).max_text_seq_length,
            "vae_tiling": cfg.family_options.enable_tiling,  # tiles blend at the seams: slightly different latents
            "vae_slicing": cfg.family_options.enable_slicing,
            "latents": "posterior_mean_fp32" + ("+first_frame" if self.task == "i2v" else ""),
            **({"text_encoder_quantized": "nf4"} if cfg.model.quantize_text_encoder else {}),  # other embeddings
        }

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(B, F, 3, H, W)`` in [-1, 1] -> ``{"latents": (B, F', C, h, w)}`` (fp32, posterior mean x scaling)."""
        vae = comps.encoders["vae"]
        video = pixel_values.to(vae.device, vae.dtype).permute(0, 2, 1, 3, 4)  # (B, 3, F, H, W)
        with torch.no_grad():
            latents = vae.encode(video).latent_dist.mode() * vae.config.scaling_factor
        check_latent_size(vae, video.shape[-2:], latents.shape[-2:])
        return {"latents": latents.permute(0, 2, 1, 3, 4).float()}

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through the pipeline's own ``encode_prompt``, padded to the transformer's text length."""
        # The pipeline's own encode_prompt (padding to max_length, truncation) keeps training prompts
        # identical to what the pipeline feeds the transformer at inference.
        kept = comps.state.max_sequence_length if comps.state is not None else None
        length = kept or transformer_config(comps.model).max_text_seq_length
        return pipeline_prompts(
            comps, self.info.pipeline_class_name, captions, with_negative=with_negative, max_sequence_length=length
        )
