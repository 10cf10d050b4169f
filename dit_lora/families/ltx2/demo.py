"""Tiny, randomly initialised LTX-2 pipelines built locally (no Hub access needed).

:func:`build_tiny_ltx2_pipeline` writes what ``LTX2Pipeline.save_pretrained`` writes for diffusers' conversion of
LTX-2 (``scripts/convert_ltx2_to_diffusers.py``): ``model_index.json`` plus ``transformer``
(``LTX2VideoTransformer3DModel``), ``vae`` (``AutoencoderKLLTX2Video``), ``audio_vae`` (``AutoencoderKLLTX2Audio``),
``connectors`` (``LTX2TextConnectors``), ``vocoder`` (``LTX2Vocoder``), ``text_encoder``
(``Gemma3ForConditionalGeneration``), ``tokenizer`` (Gemma's BPE shape) and ``scheduler``, so LoRA target names
(``attn1.to_q``, ``audio_attn1.to_k``, ``audio_to_video_attn.to_v`` ...) are the real ones. Only widths and depths
shrink (:data:`DEMO`, ``demo.json``).

The video VAE's ``latents_mean`` / ``latents_std`` are measured per channel on moving-square clips, and the audio
VAE's per packed feature on the demo's tones (the published ones are the real VAEs'), so the diffusion targets of
both streams stay at about unit variance. Weights are fp32, so ``from_pretrained(path)`` runs on a CPU.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from dit_lora.data.synthetic.clips import CLIP_TONES
from dit_lora.data.synthetic.shapes import COLORS
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the tiny model's configs and geometry, and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__,
    keys=("pipeline",),
    shared=(
        "geometry",
        "transformer",
        "vae",
        "audio_vae",
        "vocoder",
        "connectors",
        "text_encoder",
        "scheduler",
        "max_sequence_length",
    ),
)
TINY_VERSION = DEMO.read().version  # bump the file's version when configs, init or tokenizer change
TINY_GEOMETRY = DEMO.read().value("geometry")
#: the caption length the demo trains with (a multiple of the connectors' registers, as 1024 is of LTX-2's 128)
TINY_TEXT_LENGTH = DEMO.read().value("max_sequence_length")


def _tokenizer():
    """Gemma's tokenizer shape, its merges trained on the demo captions."""
    from dit_lora.data.synthetic.tokenizers import build_tiny_gemma_tokenizer

    words = (list(COLORS) + ["square", "moving", "left", "right", "top", "bottom", "to", "a"]) * 8
    return build_tiny_gemma_tokenizer(words)


def _gemma3(values: dict[str, Any]) -> tiny.Part:
    """``Gemma3ForConditionalGeneration`` (LTX-2's text encoder class) whose text vocabulary covers the tokenizer; its
    image tokens are the last ids of that vocabulary (LTX-2 feeds it text only)."""

    def make(tokenizer: Any) -> Any:
        from transformers import Gemma3Config, Gemma3ForConditionalGeneration

        vocab = tiny.padded_vocab(tokenizer)
        text = {
            **values["text_config"],
            "vocab_size": vocab,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        }
        config = Gemma3Config(
            text_config=text,
            vision_config=values["vision_config"],
            mm_tokens_per_image=values["mm_tokens_per_image"],
            image_token_index=vocab - 1,
            boi_token_index=vocab - 2,
            eoi_token_index=vocab - 3,
        )
        return Gemma3ForConditionalGeneration(config).eval()

    return tiny.Part("text_encoder", 6, make)


def _video_statistics(vae: Any) -> None:
    """The video VAE's ``latents_mean`` / ``latents_std`` buffers, per channel, from four moving-square clips."""
    g = TINY_GEOMETRY
    clips = tiny.moving_square_clips(0, 4, g["num_frames"], g["height"], g["width"])
    with torch.no_grad():
        mean, std = tiny.channel_statistics(vae.encode(clips).latent_dist.mode())
    vae.latents_mean.copy_(torch.tensor(mean))
    vae.latents_std.copy_(torch.tensor(std))


def _audio_statistics(vae: Any) -> None:
    """The audio VAE's ``latents_mean`` / ``latents_std`` buffers, per packed feature (``C x M'``, as the pipeline
    normalises packed latents), from one second of each demo tone and of silence."""
    from dit_lora.data.audio import ClipAudio
    from dit_lora.kit.clip_audio import AudioGeometry, spectrogram

    geometry = AudioGeometry.from_config(vae.config)
    rate = geometry.sample_rate
    t = torch.arange(rate) / rate
    waves = [0.5 * torch.sin(2 * math.pi * hz * t) for hz in CLIP_TONES.values()] + [torch.zeros(rate)]
    packed = []
    with torch.no_grad():
        for wave in waves:
            sound = ClipAudio(waveform=wave.expand(geometry.channels, -1), rate=rate, valid=rate)
            mel = spectrogram(sound, 1.0, geometry)
            latents = vae.encode(mel[None]).latent_dist.mode()
            packed.append(latents.transpose(1, 2).flatten(2, 3)[0])  # (L, C * M')
    features = torch.cat(packed)
    vae.latents_mean.copy_(features.mean(0))
    vae.latents_std.copy_(features.std(0).clamp(min=1e-3))


def _tiny(seed: int, layers: int) -> tiny.TinyPipeline:
    """The tiny LTX-2 pipeline (fp32) and its measured latent statistics."""
    data = DEMO.read()
    config = {key: data.value(key) for key in ("transformer", "vae", "audio_vae", "vocoder", "connectors")}
    return tiny.TinyPipeline(
        pipeline=f"diffusers:{data.variant('t2v')['pipeline']}",
        marker={"kind": "ltx2", "seed": seed, "layers": layers, "version": TINY_VERSION},
        seed=seed,
        tokenizer=_tokenizer,
        parts=(
            tiny.module(
                "transformer",
                1,
                "diffusers:LTX2VideoTransformer3DModel",
                {**config["transformer"], "num_layers": layers},
            ),
            tiny.module("vae", 2, "diffusers:AutoencoderKLLTX2Video", config["vae"], then=_video_statistics),
            tiny.module(
                "audio_vae", 3, "diffusers:AutoencoderKLLTX2Audio", config["audio_vae"], then=_audio_statistics
            ),
            tiny.module("connectors", 4, "diffusers.pipelines.ltx2:LTX2TextConnectors", config["connectors"]),
            tiny.module("vocoder", 5, "diffusers.pipelines.ltx2.vocoder:LTX2Vocoder", config["vocoder"]),
            _gemma3(data.value("text_encoder")),
        ),
        scheduler=("diffusers:FlowMatchEulerDiscreteScheduler", data.value("scheduler")),
    )


def build_tiny_ltx2_components(seed: int = 0, layers: int = 2) -> dict[str, Any]:
    """The pipeline's components, randomly initialised from ``seed`` (each module seeded on its own, the caller's RNG
    left alone), fp32 and in eval mode."""
    return tiny.build_components(_tiny(seed, layers))


def build_tiny_ltx2_pipeline(path: str | Path, *, seed: int = 0, layers: int = 2) -> Path:
    """Write a randomly initialised LTX-2 pipeline to ``path`` and return it. Idempotent (same marker: nothing
    rewritten) and atomic; a folder we did not build is refused (``FileExistsError``), as the other tiny builders do."""
    return tiny.build_pipeline(path, _tiny(seed, layers))
