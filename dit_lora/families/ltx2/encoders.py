"""LTX-2's encoders: clips through the video VAE (fp32, the posterior mode normalised as the pipeline normalises it),
captions through the pipeline's own ``encode_prompt`` (every hidden state of Gemma-3, ``--max_sequence_length``
tokens, 1024 when unset) and the text connectors (their video and audio embeddings are what the transformer takes:
cached, the connectors and Gemma-3 never run in a step), each clip's sound through the audio VAE
(:mod:`~dit_lora.kit.clip_audio`) with its frame rate; what changes the cache."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.data.batches import CLIP_FPS
from dit_lora.data.video import decode_clip
from dit_lora.data.video_prepare import frame_start
from dit_lora.families.ltx2.state import required, run_state
from dit_lora.kit.clip_audio import audio_entries
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.loader import model_class
from dit_lora.kit.prompts import CaptionLength, caption_length
from dit_lora.kit.reference_clips import reference_pixels, reference_size
from dit_lora.kit.text_conditioned import ClipSetup, encoder_identity
from dit_lora.modelfiles.pipeline_files import model_stamp

#: the pipeline's ``max_sequence_length`` default
TEXT_LEN = 1024
#: ``--max_sequence_length``, else the pipeline's default
max_sequence_length = CaptionLength(TEXT_LEN)
#: the cached conditioning of a caption: the connectors' video and audio embeddings and their mask
CAPTION_KEYS = ("prompt_embeds", "audio_prompt_embeds", "prompt_attention_mask")
#: the cache key of each clip's own frame rate (its video positions and the span of its sound)
FPS = CLIP_FPS  # the cached batches' key is the raw clip batches' (data/batches.py)
#: in-context: the cache key of each clip's reference latents ``(C, F', h / factor, w / factor)``
REFERENCE = "reference_latents"


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
        return max_sequence_length.settings(cfg.data)

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp (the VAEs, Gemma-3 and the connectors), revision, variant and text dtype, the caption
        length, whether the sound is encoded."""
        return {
            **encoder_identity(cfg, "ltx2", max_sequence_length=max_sequence_length(cfg.data)),
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
        ``--audio on``, its sound (:func:`~dit_lora.kit.clip_audio.audio_entries`)."""
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


class LTX2ICEncoders(LTX2Encoders):
    """``FamilySpec.encoders``: text-to-video's, plus each clip's reference latents."""

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """Text-to-video's, plus the reference's downscale factor."""
        factor = cfg.family_options.reference_downscale_factor
        return {**super().cache_identity(cfg, comps), "reference_downscale_factor": factor}

    def encode_samples(self, comps: Components, samples: list) -> dict[str, torch.Tensor]:
        """Text-to-video's entries, and :data:`REFERENCE`: each clip's reference through the video VAE."""
        out = super().encode_samples(comps, samples)
        state = run_state(comps)
        pixels = torch.stack([reference_pixels(s, state.reference_factor, state.frame_start) for s in samples])
        out[REFERENCE] = self.encode_images(comps, pixels)["latents"]
        return out


def load_reference_frames(cfg: TrainConfig, task, samples: list | None) -> list:
    """The validation clips' reference as PIL frames at the first bucket / the factor: ``--validation_reference``,
    else the first training clip's reference (one paragraph when it cannot give the frames)."""
    from PIL import Image

    factor = cfg.family_options.reference_downscale_factor
    frames, height, width = reference_size(task.video_buckets(cfg)[0], factor)
    path = cfg.family_options.validation_reference or (samples[0].conditions[0] if samples else None)
    if path is None:
        raise UserError("LTX-2 IC-LoRA validation needs a reference clip: set --validation_reference.")
    try:
        pixels = decode_clip(path, frames, height, width, start=frame_start(cfg.video))
    except ValueError as err:  # VideoDecodeError: unreadable or too short
        raise UserError(
            f"The validation reference clip `{path}` cannot give {frames} frames ({err}). Give --validation_reference "
            "a clip at least as long as the validation clips."
        ) from None
    array = ((pixels.permute(0, 2, 3, 1) + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()
    return [Image.fromarray(frame) for frame in array]


class LTX2ICSetup(ClipSetup):
    """``FamilySpec.setup``: the text settings, as text-to-video's (:class:`LTX2Setup`), the reference's factor and
    frame sampling recorded, the validation reference kept."""

    run_state = staticmethod(run_state)

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """The text settings, the downscale factor and how frames are taken (the references follow)."""
        super().configure(comps, cfg)
        state = run_state(comps)
        state.reference_factor = int(cfg.family_options.reference_downscale_factor)
        state.frame_start = frame_start(cfg.video)

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Keep the validation clips' reference (``--validation_reference``, else the first clip's)."""
        if cfg.validation.validation_prompt:
            run_state(comps).validation_reference = load_reference_frames(cfg, self.task, samples)
