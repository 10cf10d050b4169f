"""The kit's sound beside a clip's video latents (dit_lora/kit/clip_audio.py): the span the frames cover,
encoded by a tiny LTX-2 audio VAE exactly as LTX2Pipeline packs and normalises audio latents, a mask for what the track
covered, ragged entries for clips of other frame rates, and the masked audio loss."""

from __future__ import annotations

import pytest
import torch
from audio_clips import write_clip

from dit_lora.core.errors import UserError
from dit_lora.data.audio import decode_audio, log_mel
from dit_lora.data.text_padding import LENGTHS, cut_ragged_row
from dit_lora.data.video_sample import VideoSample
from dit_lora.kit.clip_audio import (
    LATENTS,
    MASK,
    N_FFT,
    AudioGeometry,
    audio_entries,
    encode_audio,
    masked_audio_mse,
    refuse_uniform,
    sound_mask,
)

#: a narrow AutoencoderKLLTX2Audio: LTX-2's rate, hop, causality and 4x compression; 2 x 4 packed features a step
TINY_VAE = dict(base_channels=8, output_channels=2, ch_mult=(1, 2, 4), num_res_blocks=1, in_channels=2,
                latent_channels=2, mel_bins=16, norm_type="pixel", causality_axis="height", sample_rate=16000,
                mel_hop_length=160)


@pytest.fixture(scope="module")
def vae():
    from diffusers import AutoencoderKLLTX2Audio

    torch.manual_seed(0)
    model = AutoencoderKLLTX2Audio(**TINY_VAE).eval()
    # statistics that are not the identity, so a normalisation left out or done in the wrong layout shows
    model.latents_mean.copy_(torch.linspace(-0.5, 0.5, 8))
    model.latents_std.copy_(torch.linspace(0.5, 2.0, 8))
    return model


def _sample(path, frames: int, fps: float) -> VideoSample:
    return VideoSample(key=path.name, caption="a tone", path=str(path), bucket=(frames, 32, 32), source_fps=fps,
                       source_frames=frames * 2)


def test_the_geometry_is_the_audio_vaes_and_the_pipelines_count():
    real = AudioGeometry.from_config({"sample_rate": 16000, "mel_hop_length": 160, "mel_bins": 64, "in_channels": 2,
                                      "latent_channels": 8})
    assert real.latents_per_second == 25.0 and real.samples_per_latent == 640 and real.token_width == 128
    # LTX2Pipeline: audio_num_frames = round(num_frames / frame_rate * 25)
    assert real.latent_frames(121 / 24) == round(121 / 24 * 25) == 126
    assert AudioGeometry.from_config({}) == AudioGeometry()


def test_a_tone_clip_is_encoded_as_the_pipeline_packs_and_normalises_audio_latents(tmp_path, vae):
    from diffusers import LTX2Pipeline

    clip = write_clip(tmp_path / "tone.mp4", seconds=2.0, fps=8, tone=440.0)
    geometry = AudioGeometry.from_config(vae.config)
    out = audio_entries(vae, [_sample(clip, 9, 8.0)], geometry)  # 9 frames at 8 fps: 1.125 s
    steps = round(1.125 * 25)
    assert out[LATENTS].shape == (1, steps, 8) and out[LATENTS + LENGTHS].tolist() == [steps]
    assert out[MASK].tolist() == [[1.0] * steps]
    # the reference: the same span decoded, diffusers' own packing and normalisation
    sound = decode_audio(clip, 0.0, 1.125, 16000, 2)
    mel = log_mel(sound.waveform, 16000, N_FFT, 160, 16)[None]
    with torch.no_grad():
        latents = vae.encode(mel).latent_dist.mode()
    expected = LTX2Pipeline._normalize_audio_latents(LTX2Pipeline._pack_audio_latents(latents), vae.latents_mean,
                                                     vae.latents_std)[:, :steps]
    torch.testing.assert_close(out[LATENTS], expected)


def test_a_clip_without_sound_is_silence_with_nothing_in_the_mask(tmp_path, vae):
    clip = write_clip(tmp_path / "silent.mp4", seconds=2.0, fps=8, tone=None)
    out = audio_entries(vae, [_sample(clip, 9, 8.0)], AudioGeometry.from_config(vae.config))
    assert out[LATENTS].shape == (1, 28, 8) and torch.isfinite(out[LATENTS]).all()
    assert out[MASK].sum() == 0


def test_a_track_that_starts_late_masks_the_steps_before_it(tmp_path, vae):
    clip = write_clip(tmp_path / "late.mp4", seconds=2.0, fps=8, tone=440.0, audio_delay=0.5)
    out = audio_entries(vae, [_sample(clip, 9, 8.0)], AudioGeometry.from_config(vae.config))
    mask = out[MASK][0]
    # 0.5 s at 25 steps a second: the first 12 or 13 steps had no sound (AAC's priming moves the start by a frame)
    silent = int((mask == 0).sum())
    assert 11 <= silent <= 14 and mask[:silent].sum() == 0 and mask[silent:].eq(1).all()


def test_clips_at_other_frame_rates_are_cached_ragged(tmp_path, vae):
    slow = write_clip(tmp_path / "slow.mp4", seconds=2.0, fps=8, tone=440.0)
    fast = write_clip(tmp_path / "fast.mp4", seconds=2.0, fps=16, tone=220.0)
    out = audio_entries(vae, [_sample(slow, 9, 8.0), _sample(fast, 9, 16.0)], AudioGeometry.from_config(vae.config))
    long, short = round(9 / 8 * 25), round(9 / 16 * 25)
    assert out[LATENTS].shape == (2, long, 8) and out[LATENTS + LENGTHS].tolist() == [long, short]
    row = cut_ragged_row({k: v[1] for k, v in out.items()})
    assert row[LATENTS].shape == (short, 8) and row[MASK].shape == (short,) and row[MASK].eq(1).all()


def test_an_image_or_an_unknown_frame_rate_has_no_sound(tmp_path, vae):
    clip = write_clip(tmp_path / "tone.mp4", seconds=1.0, fps=8, tone=440.0)
    out = audio_entries(vae, [_sample(clip, 9, 0.0)], AudioGeometry.from_config(vae.config))
    assert out[LATENTS].shape == (1, 1, 8) and out[MASK].sum() == 0


def test_the_mask_counts_a_step_when_half_its_samples_came_from_the_track():
    from dit_lora.data.audio import ClipAudio

    geometry = AudioGeometry()  # 640 samples a step
    sound = ClipAudio(waveform=torch.zeros(2, 6400), rate=16000, valid=320 + 1280, first_valid=960)
    # step 1 [640, 1280): 320 of 640 valid (half: counted); steps 2-3 whole; step 4 [2560, 3200): none
    assert sound_mask(sound, geometry, 5).tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    assert sound_mask(None, geometry, 3).tolist() == [0.0, 0.0, 0.0]


def test_uniform_frame_sampling_with_sound_is_one_paragraph():
    refuse_uniform("first", "LTX-2")
    with pytest.raises(UserError, match=r"--frame_sampling uniform .* LTX-2 .* --frame_sampling first .* --audio off"):
        refuse_uniform("uniform", "LTX-2")


def test_the_audio_loss_leaves_silent_samples_and_steps_out():
    torch.manual_seed(0)
    pred = torch.randn(3, 5, 4, requires_grad=True)
    target = torch.randn(3, 5, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.float32)
    weights = torch.tensor([1.0, 1.0, 2.0])
    loss = masked_audio_mse(pred, target, mask, weights)
    per_step = ((pred - target) ** 2).mean(-1)
    expected = (per_step[0, :3].mean() + 2.0 * per_step[2].mean()) / 2  # the two sounding samples
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert pred.grad[1].eq(0).all() and pred.grad[0, 3:].eq(0).all() and pred.grad[2].ne(0).all()


def test_a_batch_without_sound_gives_zero_and_no_gradient():
    pred = torch.randn(2, 3, 4, requires_grad=True)
    loss = masked_audio_mse(pred, torch.randn(2, 3, 4), torch.zeros(2, 3), torch.ones(2))
    loss.backward()
    assert loss.item() == 0.0 and pred.grad.eq(0).all()


def test_a_span_longer_than_the_spectrogram_is_an_error_not_a_short_entry(vae):
    """Asking more latent steps than the spectrogram gives raises (a cache entry shorter than its mask would
    misalign the loss)."""
    mel = torch.zeros(1, 2, 8, 16)  # 8 mel frames: 2 latent steps
    assert encode_audio(vae, mel, 2).shape == (1, 2, 8)
    with pytest.raises(ValueError, match="gave 2 latent steps for a span that needs 5"):
        encode_audio(vae, mel, 5)
