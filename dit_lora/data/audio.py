"""A clip's own sound for the families that train audio with video (LTX-2): the audio track decoded with PyAV,
resampled to the model's rate, cut to the span the clip's video frames cover, and the log-mel spectrogram an audio
VAE encodes.

* :func:`decode_audio` gives the waveform of ``[start, start + duration)`` seconds of a clip, timed against the
  clip's first video frame (the stream's own timestamps: an audio track that starts late or is shorter than the
  video is padded with silence, and how much of it was sound is said in :attr:`ClipAudio.valid`); a clip without
  an audio track gives ``None``, never silence passed off as sound.
* :func:`log_mel` is the spectrogram LTX-2's audio VAE was trained on (Lightricks' trainer and SimpleTuner compute
  it with torchaudio's ``MelSpectrogram``: magnitude (power 1), Hann window, centred with reflection, Slaney mel
  scale and area normalisation, natural log clamped at 1e-5). torchaudio's wheels are built against one torch
  release each, so the filter bank here is transformers' own (``audio_utils.mel_filter_bank``), the same matrix,
  and the STFT is torch's.

Resampling is libswresample's (PyAV's ``AudioResampler``), the resampler ffmpeg itself uses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from dit_lora.data.video_sample import VideoDecodeError, _av, describe_error


@dataclass(frozen=True)
class ClipAudio:
    """``waveform``: float32 ``(channels, samples)`` at ``rate``; ``valid`` of its samples, from ``first_valid`` on,
    came from the track (the rest is silence, where the track started late or ended before the span did)."""

    waveform: torch.Tensor
    rate: int
    valid: int
    first_valid: int = 0

    @property
    def sound_fraction(self) -> float:
        """The share of the span the track covered (1.0: all of it)."""
        return self.valid / max(self.waveform.shape[-1], 1)


def has_audio(path: str | os.PathLike) -> bool:
    """Whether the file has an audio stream (read from its header; nothing decoded)."""
    av = _av()
    try:
        with av.open(os.fspath(path)) as container:
            return bool(container.streams.audio)
    except (av.FFmpegError, OSError, ValueError) as err:
        raise VideoDecodeError(f"not a readable video ({describe_error(err)})") from None


def decode_audio(
    path: str | os.PathLike, start: float, duration: float, rate: int, channels: int = 2
) -> ClipAudio | None:
    """The clip's sound over ``[start, start + duration)`` seconds after its first video frame, resampled to
    ``rate`` Hz with ``channels`` channels (mono is duplicated, surround folded down by libswresample); ``None``
    when the file has no audio track.

    Raises:
        VideoDecodeError: the file cannot be read, or its audio track fails to decode midway.
    """
    if duration <= 0 or rate <= 0:
        raise ValueError(f"duration and rate must be positive, got {duration} s at {rate} Hz")
    if channels not in (1, 2):
        raise ValueError(f"channels must be 1 (mono) or 2 (stereo), got {channels}")
    av = _av()
    layout = "mono" if channels == 1 else "stereo"
    span = round(duration * rate)
    first = round(start * rate)
    out = np.zeros((channels, span), dtype=np.float32)
    opened = False
    try:
        with av.open(os.fspath(path)) as container:
            opened = True
            if not container.streams.audio:
                return None
            stream = container.streams.audio[0]
            origin = _video_origin(container)
            resampler = av.AudioResampler(format="fltp", layout=layout, rate=rate)
            position: int | None = None
            pieces: list[np.ndarray] = []
            decoded = 0
            for frame in container.decode(stream):
                if position is None:  # where the track's first sample falls on the video's clock
                    position = round(((frame.time or 0.0) - origin) * rate)
                for piece in resampler.resample(frame):
                    pieces.append(piece.to_ndarray())
                    decoded += pieces[-1].shape[-1]
                if position + decoded >= first + span:  # the span is covered: the rest is never read
                    break
            pieces.extend(piece.to_ndarray() for piece in resampler.resample(None))
    except (av.FFmpegError, OSError, ValueError, EOFError) as err:
        if opened:
            raise VideoDecodeError(f"its audio track cannot be decoded ({describe_error(err)})") from None
        raise VideoDecodeError(f"not a readable video ({describe_error(err)})") from None
    if position is None or not pieces:
        return ClipAudio(torch.from_numpy(out), rate, valid=0)
    track = np.concatenate(pieces, axis=-1)[:channels]
    lo, hi = max(first, position), min(first + span, position + track.shape[-1])
    if hi <= lo:  # the track ended before the span began (or starts after it): all silence
        return ClipAudio(torch.from_numpy(out), rate, valid=0)
    out[:, lo - first : hi - first] = track[:, lo - position : hi - position]
    return ClipAudio(torch.from_numpy(out), rate, valid=hi - lo, first_valid=lo - first)


def _video_origin(container) -> float:
    """The time of the clip's first video frame (0 for an audio-only file): the audio is cut on that clock."""
    if not container.streams.video:
        return 0.0
    video = container.streams.video[0]
    if video.start_time is None:
        return 0.0
    return float(video.start_time * video.time_base)


@lru_cache(maxsize=8)
def _mel_filters(n_fft: int, mel_bins: int, rate: int) -> torch.Tensor:
    """``(n_fft // 2 + 1, mel_bins)``: Slaney-scale triangles from 0 Hz to Nyquist, area-normalised (torchaudio's
    ``melscale_fbanks(..., norm="slaney", mel_scale="slaney")``)."""
    from transformers.audio_utils import mel_filter_bank

    bank = mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1,
        num_mel_filters=mel_bins,
        min_frequency=0.0,
        max_frequency=rate / 2.0,
        sampling_rate=rate,
        norm="slaney",
        mel_scale="slaney",
    )
    return torch.from_numpy(np.asarray(bank, dtype=np.float32))


def log_mel(waveform: torch.Tensor, rate: int, n_fft: int, hop_length: int, mel_bins: int) -> torch.Tensor:
    """``(..., samples)`` -> ``(..., frames, mel_bins)``: the natural log of the Slaney mel magnitude spectrogram,
    clamped at 1e-5, one frame every ``hop_length`` samples (``samples // hop_length + 1`` frames, centred)."""
    lead = waveform.shape[:-1]
    flat = waveform.reshape(-1, waveform.shape[-1]).float()
    window = torch.hann_window(n_fft, dtype=flat.dtype, device=flat.device)
    spec = torch.stft(
        flat,
        n_fft,
        hop_length=hop_length,
        win_length=n_fft,
        window=window,
        center=True,
        pad_mode="reflect",
        return_complex=True,
    ).abs()  # (N, n_fft // 2 + 1, frames)
    mel = torch.matmul(spec.transpose(1, 2), _mel_filters(n_fft, mel_bins, rate).to(flat.device))
    return torch.log(mel.clamp_min(1e-5)).reshape(*lead, mel.shape[-2], mel_bins)
