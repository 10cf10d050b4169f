"""A clip's sound (dit_lora/data/audio.py): the track decoded, resampled and cut on the video's clock; no track is
``None``; the log-mel spectrogram against a reference computed here from its definition."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dit_lora.data.audio import decode_audio, has_audio, log_mel
from dit_lora.data.video_sample import VideoDecodeError

from audio_clips import write_clip


def peak_hz(wave: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(wave * np.hanning(len(wave))))
    return float(np.argmax(spectrum)) * rate / len(wave)


def test_the_tone_comes_back_resampled_cut_to_the_span(tmp_path):
    clip = write_clip(tmp_path / "tone.mp4", tone=440.0)
    assert has_audio(clip)
    got = decode_audio(clip, start=0.5, duration=1.0, rate=16000)
    assert got is not None and got.waveform.shape == (2, 16000) and got.waveform.dtype == torch.float32
    assert got.valid == 16000 and got.first_valid == 0 and got.sound_fraction == 1.0
    assert abs(peak_hz(got.waveform[0].numpy(), 16000) - 440.0) < 2.0
    assert 0.3 < got.waveform.abs().max() < 0.6  # the sine's amplitude, not a gain change
    torch.testing.assert_close(got.waveform[0], got.waveform[1])  # both channels carry it


def test_a_clip_without_sound_gives_none_not_silence(tmp_path):
    clip = write_clip(tmp_path / "silent.mp4", tone=None)
    assert not has_audio(clip)
    assert decode_audio(clip, start=0.0, duration=1.0, rate=16000) is None


def test_mono_is_duplicated_and_the_channels_asked_for_come_back(tmp_path):
    clip = write_clip(tmp_path / "mono.mp4", layout="mono", tone=1000.0)
    stereo = decode_audio(clip, start=0.0, duration=1.0, rate=16000)
    mono = decode_audio(clip, start=0.0, duration=1.0, rate=16000, channels=1)
    assert stereo is not None and mono is not None and mono.waveform.shape == (1, 16000)
    torch.testing.assert_close(stereo.waveform[0], stereo.waveform[1])
    assert abs(peak_hz(mono.waveform[0, 2000:].numpy(), 16000) - 1000.0) < 4.0


def test_a_track_shorter_than_the_span_is_padded_and_says_how_much_was_sound(tmp_path):
    clip = write_clip(tmp_path / "short.mp4", seconds=2.0, audio_seconds=1.0)
    got = decode_audio(clip, start=0.5, duration=1.0, rate=16000)
    assert got is not None and got.waveform.shape == (2, 16000)
    # the track ends near 1.0 s (AAC pads its last frame): about half the span is sound, the rest zeros
    assert 0.45 < got.sound_fraction < 0.6, got.sound_fraction
    assert torch.count_nonzero(got.waveform[:, got.valid + 100 :]) == 0


def test_a_span_after_the_track_ended_is_all_silence_and_says_so(tmp_path):
    clip = write_clip(tmp_path / "short.mp4", seconds=3.0, audio_seconds=1.0)
    got = decode_audio(clip, start=2.0, duration=0.5, rate=16000)
    assert got is not None and got.valid == 0 and got.first_valid == 0 and got.sound_fraction == 0.0
    assert got.waveform.shape == (2, 8000) and torch.count_nonzero(got.waveform) == 0
    # and a span before a late track starts: no sound, and no start of sound claimed past the span's end
    late = write_clip(tmp_path / "late.mp4", seconds=3.0, audio_delay=2.0, audio_seconds=1.0)
    got = decode_audio(late, start=0.0, duration=1.0, rate=16000)
    assert got is not None and got.valid == 0 and got.first_valid == 0
    assert torch.count_nonzero(got.waveform) == 0


def test_bad_arguments_are_refused_before_the_file_is_opened(tmp_path):
    missing = tmp_path / "never-opened.mp4"
    for kwargs, words in (({"duration": 0.0}, "must be positive"), ({"rate": -1}, "must be positive"),
                          ({"channels": 6}, "1 \\(mono\\) or 2 \\(stereo\\)")):
        args = {"start": 0.0, "duration": 1.0, "rate": 16000, **kwargs}
        with pytest.raises(ValueError, match=words):
            decode_audio(missing, **args)


def test_a_late_track_is_placed_on_the_video_clock(tmp_path):
    clip = write_clip(tmp_path / "late.mp4", audio_delay=0.5, audio_seconds=1.5)
    got = decode_audio(clip, start=0.0, duration=1.0, rate=16000)
    assert got is not None
    # the first half second is silence, to within one AAC frame (its 1,024 priming samples at 44.1 kHz: 372 here)
    assert abs(got.first_valid - 8000) <= 400, got.first_valid
    assert got.waveform[:, : got.first_valid].abs().max() == 0
    assert got.waveform[:, 9000:].abs().max() > 0.3


def test_an_unreadable_file_is_named_as_such(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all")
    with pytest.raises(VideoDecodeError, match="not a readable video"):
        has_audio(bad)
    with pytest.raises(VideoDecodeError, match="not a readable video"):
        decode_audio(bad, start=0.0, duration=1.0, rate=16000)


def test_a_track_damaged_midway_is_named_as_the_audio_s(tmp_path):
    """A readable file whose audio packets are zeroed midway: the error names the audio track, not the file."""
    clip = write_clip(tmp_path / "tone.mp4", seconds=2.0)
    data = bytearray(clip.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4000] = bytes(4000)  # zeros over part of the interleaved packets
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    with pytest.raises(VideoDecodeError, match="its audio track cannot be decoded"):
        decode_audio(damaged, start=0.0, duration=2.0, rate=16000)


def _reference_log_mel(wave: np.ndarray, rate: int, n_fft: int, hop: int, bins: int) -> np.ndarray:
    """The definition, in numpy, loop by loop: reflect-padded Hann frames, |rfft|, Slaney triangles (linear below
    1 kHz, log above) normalised to unit area (2 / band width), natural log clamped at 1e-5."""

    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        return np.where(f < 1000.0, 3.0 * f / 200.0, 15.0 + 27.0 * np.log(np.maximum(f, 1e-9) / 1000.0) / math.log(6.4))

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        return np.where(m < 15.0, 200.0 * m / 3.0, 1000.0 * np.exp(math.log(6.4) * (m - 15.0) / 27.0))

    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(rate / 2), bins + 2))
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    bank = np.zeros((n_fft // 2 + 1, bins))
    for b in range(bins):
        lo, mid, hi = edges[b : b + 3]
        up, down = (freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)
        bank[:, b] = np.maximum(0, np.minimum(up, down)) * 2.0 / (hi - lo)
    padded = np.pad(wave, n_fft // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann, as torch's
    frames = [padded[i : i + n_fft] * window for i in range(0, len(padded) - n_fft + 1, hop)]
    spec = np.abs(np.fft.rfft(np.stack(frames), axis=-1))
    return np.log(np.maximum(spec @ bank, 1e-5))


@pytest.mark.parametrize("rate,n_fft,hop,bins", [(16000, 1024, 160, 64), (16000, 400, 160, 80), (8000, 256, 97, 17)])
def test_log_mel_is_the_slaney_magnitude_spectrogram(rate, n_fft, hop, bins):
    g = torch.Generator().manual_seed(0)
    wave = torch.randn(2, 3, 4001, generator=g) * 0.1  # batch and channels kept, an odd length
    got = log_mel(wave, rate, n_fft, hop, bins)
    assert got.shape == (2, 3, 4001 // hop + 1, bins)
    want = _reference_log_mel(wave[1, 2].double().numpy(), rate, n_fft, hop, bins)
    np.testing.assert_allclose(got[1, 2].numpy(), want, rtol=0, atol=2e-4)


def test_log_mel_of_a_tone_peaks_in_the_band_of_its_frequency():
    rate, bins = 16000, 64
    t = torch.arange(rate) / rate
    mel = log_mel(torch.sin(2 * torch.pi * 440.0 * t)[None], rate, 1024, 160, bins)
    from transformers.audio_utils import hertz_to_mel

    top = int(mel[0, 50].argmax())
    lo, hi = (hertz_to_mel(0.0, "slaney"), hertz_to_mel(rate / 2, "slaney"))
    centre = hertz_to_mel(440.0, "slaney")
    assert abs(top - ((centre - lo) / (hi - lo) * (bins + 1) - 1)) <= 1.5
    assert float(log_mel(torch.zeros(1, 1600), rate, 1024, 160, bins).max()) == pytest.approx(math.log(1e-5))
