"""LTX-2's encoders: clips through the video VAE (fp32, the posterior mode normalised as the pipeline normalises it),
captions through the pipeline's own ``encode_prompt`` (every hidden state of Gemma-3, ``--max_sequence_length``
tokens, 1024 when unset) and the text connectors (their video and audio embeddings are what the transformer takes:
cached, the connectors and Gemma-3 never run in a step), each clip's sound through the audio VAE
(:mod:`~dit_lora.families.diffusion.clip_audio`) with its frame rate; what changes the cache."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.data.batches import CLIP_FPS
from dit_lora.families.diffusion.clip_audio import audio_entries
from dit_lora.families.diffusion.components import DiffusionEncoders
from dit_lora.families.diffusion.loader import model_class
from dit_lora.families.diffusion.prompts import CaptionLength, caption_length
from dit_lora.families.diffusion.text_conditioned import ClipSetup, encoder_identity
from dit_lora.families.ltx2.state import required, run_state
from dit_lora.modelfiles.pipeline_files import model_stamp

#: the pipeline's ``max_sequence_length`` default
TEXT_LEN = 1024
#: ``--max_sequence_length``, else the pipeline's default
max_sequence_length = CaptionLength(TEXT_LEN)
#: the cached conditioning of a caption: the connectors' video and audio embeddings and their mask
CAPTION_KEYS = ("prompt_embeds", "audio_prompt_embeds", "prompt_attention_mask")
#: the cache key of each clip's own frame rate (its video positions and the span of its sound)
FPS = CLIP_FPS  # the cached batches' key is the raw clip batches' (data/batches.py)


def connector_embeddings(
    comps: Components, captions: list[str], length: int, negative: bool
) -> dict[str, torch.Tensor]:
    """``captions`` (and, with ``negative``, the empty negative prompt) through ``LTX2Pipeline.encode_prompt`` and
    the text connectors as the pipeline runs them (Gemma pads on the left): :data:`CAPTION_KEYS`, the negative's
    under ``negative_`` + each."""
    encoders = comps.encoders
    pipe = model_class("diffusers", "LTX2Pipeline")(  # Any: mypy takes diffusers' top-level names for dummies
        scheduler=None,
        vae=None,
        audio_vae=None,
        text_encoder=encoders["text_encoder"],
        tokenizer=encoders["tokenizer"],
        connectors=encoders["connectors"],
        transformer=None,
        vocoder=None,
    )
    device = encoders["text_encoder"].device
    with torch.no_grad():
        embeds, mask, neg_embeds, neg_mask = pipe.encode_prompt(
            list(captions),
            negative_prompt="",
            do_classifier_free_guidance=negative,
            max_sequence_length=length,
            device=device,
        )
        out: dict[str, torch.Tensor] = {}
        for prefix, (e, m) in (("", (embeds, mask)), ("negative_", (neg_embeds, neg_mask))):
            if e is None:
                continue
            side = getattr(pipe.tokenizer, "padding_side", "left")
            video, audio, joint = encoders["connectors"](e.to(encoders["connectors"].dtype), m, padding_side=side)
            out.update(zip((prefix + k for k in CAPTION_KEYS), (video, audio, joint)))
    return out


class LTX2Encoders(DiffusionEncoders):
    """``FamilySpec.encoders``: normalised video latents, the connectors' caption embeddings and, with ``--audio
    on``, each clip's sound (its audio VAE latents and the mask of the steps its track covers) and frame rate."""

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's caption length (a multiple of the connectors' registers: checked when they load)."""
        return max_sequence_length.settings(cfg)

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp (the VAEs, Gemma-3 and the connectors), revision, variant and text dtype, the caption
        length, whether the sound is encoded."""
        return {
            **encoder_identity(cfg, "ltx2", max_sequence_length=max_sequence_length(cfg)),
            "encoders_stamp": model_stamp(cfg.model, ("audio_vae", "connectors")),
            "audio": cfg.family_options.audio,
            "latents": "posterior_mode_normalised_fp32",
        }

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(B, F, 3, H, W)`` in [-1, 1] -> ``{"latents": (B, C, F', h, w)}``: the posterior mode,
        ``(z - latents_mean) * scaling_factor / latents_std`` as ``LTX2Pipeline._normalize_latents``."""
        state = run_state(comps)
        mean, std = required(state.latents_mean, "latents_mean"), required(state.latents_std, "latents_std")
        vae = comps.encoders["vae"]
        video = pixel_values.to(vae.device, vae.dtype).permute(0, 2, 1, 3, 4)  # (B, 3, F, H, W)
        with torch.no_grad():
            latents = vae.encode(video).latent_dist.mode().float()
        return {"latents": (latents - mean.to(latents.device)) * state.scaling_factor / std.to(latents.device)}

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """:func:`connector_embeddings` at the run's caption length."""
        length = caption_length(comps.state.text if comps.state is not None else None, TEXT_LEN)
        return connector_embeddings(comps, captions, length, with_negative)

    def encode_samples(self, comps: Components, samples: list) -> dict[str, torch.Tensor]:
        """The captions, each clip's frame rate (0: an image or a rate the container does not give) and, with
        ``--audio on``, its sound (:func:`~dit_lora.families.diffusion.clip_audio.audio_entries`)."""
        out = self.encode_prompts(comps, [s.caption for s in samples])
        out[FPS] = torch.tensor([float(getattr(s, "source_fps", 0.0) or 0.0) for s in samples])
        state = run_state(comps)
        if state.with_audio:
            out.update(audio_entries(comps.encoders["audio_vae"], samples, required(state.audio, "audio")))
        return out


class LTX2Setup(ClipSetup):
    """``FamilySpec.setup``: the text settings recorded once the components load; image-to-video keeps its
    conditioning image and refuses still images."""

    run_state = staticmethod(run_state)
    text_to_video = "--family ltx2 (text-to-video)"
