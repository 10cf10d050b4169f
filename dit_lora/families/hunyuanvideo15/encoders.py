"""HunyuanVideo 1.5's encoders: clips through its VAE (fp32, the posterior mode times ``scaling_factor``, as the
pipelines scale it), captions through the pipeline's own encoders (Qwen2.5-VL: the system message, the template's
first 108 tokens cropped, ``hidden_states[-3]``, each caption's own tokens cached; ByT5: the prompt's quoted text,
256 tokens), image-to-video's first frame through SigLIP; what changes the cache; and the run's setup.

The Qwen2.5-VL embeddings are cached ragged (:data:`~dit_lora.data.text_padding.LENGTHS`): the pipeline pads every
caption to 1,000 tokens of 3,584 features (7 MB a caption in bf16), which its transformer masks and moves behind the
valid tokens; each cached caption keeps its own tokens, counted on the host, and a batch pads them back.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.data.text_padding import LENGTHS
from dit_lora.families.hunyuanvideo15.info import T2V_PIPELINE, HunyuanVideo15Task
from dit_lora.families.hunyuanvideo15.state import required, run_state
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.conditioning import to_pil
from dit_lora.kit.latents import model_identity
from dit_lora.kit.prompts import CaptionLength
from dit_lora.kit.text_conditioned import ClipSetup

#: the pipelines' Qwen2.5-VL caption length (``tokenizer_max_length``) and ByT5's (``tokenizer_2_max_length``)
TEXT_LEN, GLYPH_LEN = 1000, 256
#: ``--max_sequence_length``, else the pipelines' 1,000 Qwen2.5-VL tokens
max_sequence_length = CaptionLength(TEXT_LEN)
#: the batch key of the captions' Qwen2.5-VL token counts (host int64), beside the ragged ``prompt_embeds``
LENGTHS_KEY = "prompt_embeds" + LENGTHS


def pipeline_class() -> Any:
    """``HunyuanVideo15Pipeline`` (its encoders are static methods; imported on use: diffusers imports slowly)."""
    import diffusers

    return getattr(diffusers, T2V_PIPELINE)


def template_defaults() -> dict[str, Any]:
    """The pipelines' system message and template crop (``_get_mllm_prompt_embeds``' defaults, which ``__init__``
    also sets)."""
    params = inspect.signature(pipeline_class()._get_mllm_prompt_embeds).parameters
    return {"system_message": params["system_message"].default, "crop_start": params["crop_start"].default}


def caption_token_counts(tokenizer, captions: list[str], length: int) -> list[int]:
    """Each caption's Qwen2.5-VL tokens after the crop, counted on the host by the tokenizer call the pipeline makes."""
    from diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5 import format_text_input

    defaults = template_defaults()
    inputs = tokenizer.apply_chat_template(
        format_text_input(list(captions), defaults["system_message"]),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        padding="max_length",
        max_length=length + defaults["crop_start"],
        truncation=True,
        return_tensors="pt",
    )
    return [int(n) for n in inputs["attention_mask"][:, defaults["crop_start"] :].sum(1).tolist()]


def own_tokens(embeds: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Right-padded ``(B, L, F)`` caption embeddings cut to the longest caption's tokens (each row's own first, the
    padding after them zeroed): the ragged layout the cache keeps."""
    out = embeds[:, : max(max(lengths), 1)].clone()
    for row, n in enumerate(lengths):
        out[row, n:] = 0
    return out


def encode_captions(comps: Components, captions: list[str], length: int) -> dict[str, torch.Tensor]:
    """``captions`` through the pipeline's Qwen2.5-VL and ByT5 encoders: ``prompt_embeds`` (each caption's own
    tokens) with their counts (``prompt_embeds_lengths``), ``prompt_embeds_2`` with its mask."""
    pipe, encoder = pipeline_class(), comps.encoders["text_encoder"]
    defaults = template_defaults()
    lengths = caption_token_counts(comps.encoders["tokenizer"], captions, length)
    with torch.no_grad():
        embeds, _ = pipe._get_mllm_prompt_embeds(
            encoder,
            comps.encoders["tokenizer"],
            list(captions),
            encoder.device,
            tokenizer_max_length=length,
            **defaults,
        )
        glyphs, glyph_mask = pipe._get_byt5_prompt_embeds(
            comps.encoders["tokenizer_2"], comps.encoders["text_encoder_2"], list(captions), encoder.device, GLYPH_LEN
        )
    return {
        "prompt_embeds": own_tokens(embeds, lengths),
        LENGTHS_KEY: torch.tensor(lengths, dtype=torch.int64),
        "prompt_embeds_2": glyphs.to(encoder.dtype),
        "prompt_embeds_mask_2": glyph_mask.to(torch.int64),
    }


def padded_prompt(cond: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """Cached (ragged) captions as the pipelines take them: ``prompt_embeds`` and ``prompt_embeds_mask`` (1 on each
    caption's own tokens), ``prompt_embeds_2`` and ``prompt_embeds_mask_2``; ``prefix``: ``"negative_"``'s."""
    embeds, lengths = cond[prefix + "prompt_embeds"], cond[prefix + LENGTHS_KEY]
    positions = torch.arange(embeds.shape[1], device=embeds.device)
    mask = (positions[None] < lengths.to(embeds.device)[:, None]).to(torch.int64)
    keys = ("prompt_embeds_2", "prompt_embeds_mask_2")
    return {
        prefix + "prompt_embeds": embeds,
        prefix + "prompt_embeds_mask": mask,
        **{prefix + k: cond[prefix + k] for k in keys},
    }


class HunyuanVideo15Encoders(DiffusionEncoders):
    """``FamilySpec.encoders``: scaled VAE latents of the clip (image-to-video: the first frame's SigLIP tokens too)
    and the pipelines' caption embeddings (:func:`encode_captions`)."""

    def __init__(self, task: HunyuanVideo15Task) -> None:
        self.task = task

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's Qwen2.5-VL caption length."""
        return max_sequence_length.settings(cfg.data)

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp (VAE, both text encoders, SigLIP for image-to-video), revision, variant and text
        dtype, the caption length and what the latents are."""
        i2v = self.task.task == "i2v"
        stamped = ("vae", "text_encoder", "text_encoder_2", *(("image_encoder",) if i2v else ()))
        return {
            "family": "hunyuanvideo15",
            **model_identity(cfg, "model_stamp", stamped),
            "text_dtype": cfg.training.mixed_precision,
            "max_sequence_length": max_sequence_length(cfg.data),
            "latents": "posterior_mode_scaled_fp32",
            "vae_tiling": "256px_tiles_overlap_0.25",  # a clip over 256 px a side encodes in blended tiles
            **({"image_embeds": "siglip_first_frame"} if i2v else {}),
            **({"text_encoder_quantized": "nf4"} if cfg.model.quantize_text_encoder else {}),
        }

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(B, F, 3, H, W)`` in [-1, 1] -> ``{"latents": (B, 32, F', h, w)}``: the posterior mode times the VAE's
        ``scaling_factor`` (:meth:`clip_latents`); image-to-video adds
        ``image_embeds``, SigLIP's tokens of each clip's first frame as the pipeline computes them."""
        out = {"latents": self.clip_latents(comps, pixel_values)}
        if self.task.task == "i2v":
            out["image_embeds"] = first_frame_tokens(comps, pixel_values[:, 0])
        return out

    def clip_latents(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        """``(B, F, 3, H, W)`` in [-1, 1] -> ``(B, 32, F', h, w)``: the posterior mode times ``scaling_factor``, fp32
        (the VAE tiled and sliced by :func:`~.model.tiled`)."""
        vae = comps.encoders["vae"]
        scale = required(run_state(comps).scaling_factor, "scaling_factor")
        clips = pixel_values.to(vae.device, torch.float32).transpose(1, 2)  # (B, 3, F, H, W)
        with torch.no_grad():
            latents = vae.encode(clips).latent_dist.mode() * scale
        return latents.float()

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """:func:`encode_captions` at the run's caption length (and the empty negative prompt's, as the pipelines
        encode a missing one)."""
        length = max_sequence_length.recorded(run_state(comps).text)
        out = encode_captions(comps, captions, length)
        if with_negative:
            out.update({f"negative_{k}": v for k, v in encode_captions(comps, [""], length).items()})
        return out


def first_frame_tokens(comps: Components, frames: torch.Tensor) -> torch.Tensor:
    """``(B, 3, H, W)`` first frames in [-1, 1] through the pipeline's SigLIP path (its processor on the PIL image,
    ``last_hidden_state``), fp32."""
    encoder, processor = comps.encoders["image_encoder"], comps.encoders["feature_extractor"]
    with torch.no_grad():
        tokens = [
            pipeline_i2v()._get_image_embeds(encoder, processor, image, encoder.device) for image in to_pil(frames)
        ]
    return torch.cat(tokens).float()


def pipeline_i2v() -> Any:
    """``HunyuanVideo15ImageToVideoPipeline`` (its image encoder is a static method)."""
    import diffusers

    return diffusers.HunyuanVideo15ImageToVideoPipeline


class HunyuanVideo15Setup(ClipSetup):
    """``FamilySpec.setup``: the text settings recorded once the components load; image-to-video keeps its
    conditioning image and refuses still images."""

    run_state = staticmethod(run_state)
    text_to_video = "--family hunyuanvideo15 (text-to-video)"
