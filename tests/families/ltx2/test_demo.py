"""families/ltx2/demo.py: the tiny pipeline keeps the real audio path (the VAE's 4x compression, a vocoder that
upsamples by the hop) and its measured statistics put both streams' latents near unit variance."""

from __future__ import annotations

import torch

from dit_lora.kit.clip_audio import AudioGeometry, spectrogram
from dit_lora.families.ltx2.demo import TINY_GEOMETRY, TINY_TEXT_LENGTH


def test_the_audio_path_is_whole(tiny):
    vocoder, audio_vae = tiny["vocoder"], tiny["audio_vae"]
    factors = vocoder.config.upsample_factors
    assert factors[0] * factors[1] == audio_vae.config.mel_hop_length
    geometry = AudioGeometry.from_config(audio_vae.config)
    assert geometry.token_width == tiny["transformer"].config.audio_in_channels == audio_vae.latents_mean.numel()
    assert TINY_TEXT_LENGTH % tiny["connectors"].config.video_connector_num_learnable_registers == 0


def test_statistics_normalise_both_streams(tiny):
    from dit_lora.kit import tiny as kit

    g = TINY_GEOMETRY
    clips = kit.moving_square_clips(1, 4, g["num_frames"], g["height"], g["width"])
    vae = tiny["vae"]
    with torch.no_grad():
        latents = vae.encode(clips).latent_dist.mode()
    normal = (latents - vae.latents_mean.view(1, -1, 1, 1, 1)) / vae.latents_std.view(1, -1, 1, 1, 1)
    assert 0.5 < normal.std() < 2.0 and normal.mean().abs() < 0.5
    audio_vae = tiny["audio_vae"]
    geometry = AudioGeometry.from_config(audio_vae.config)
    wave = 0.5 * torch.sin(torch.arange(16000) / 16000 * 2 * torch.pi * 440).expand(2, -1)
    sound = type("Sound", (), {"waveform": wave, "valid": 16000})
    with torch.no_grad():
        packed = audio_vae.encode(spectrogram(sound, 1.0, geometry)[None]).latent_dist.mode().transpose(1, 2).flatten(2)
    normal = (packed - audio_vae.latents_mean) / audio_vae.latents_std
    assert normal.abs().max() < 10
