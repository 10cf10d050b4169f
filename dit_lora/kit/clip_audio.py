"""The diffusers family kit's sound: a clip's own audio, encoded by the model's audio VAE and cached beside its video
latents, for the families that train audio with video (LTX-2); and the audio part of their loss.

What one clip gives (:func:`audio_entries`, a family's ``encode_samples`` calls it):

1. **The span its frames cover.** ``--frame_sampling first`` takes the bucket's frames consecutively from the first,
   so they cover ``frames / fps`` seconds of the clip from its first frame (the container's own frame rate). Their
   sound is that span of the track, nothing else: ``--frame_sampling uniform`` speeds the motion up by a
   clip-dependent factor, which no audio can follow, and a family refuses it with sound on (:func:`refuse_uniform`).
2. **The waveform** (:func:`~dit_lora.data.audio.decode_audio`): decoded with PyAV, resampled to the VAE's rate and
   channels, cut on the clock of the first video frame; a clip without an audio track (or an image, a clip whose
   frame rate the container does not give) has none.
3. **The log-mel spectrogram** the audio VAE takes (:func:`~dit_lora.data.audio.log_mel`: ``(channels, T, mel_bins)``,
   the VAE's hop and mel bins, the window :data:`N_FFT`).
4. **The latents**: the posterior's mode, packed as the pipeline packs them (``LTX2Pipeline._pack_audio_latents``:
   ``(L, C * M')``, every latent mel bin of a time step one token), normalised by the VAE's ``latents_mean`` /
   ``latents_std`` (``_normalize_audio_latents``), and cut to the pipeline's own count for the span,
   ``round(seconds * rate / hop / 4)`` (the VAE's causal convolutions give one more for the centred STFT's last
   half window, past the span).
5. **The mask**: 1 for each latent time step the track covers (at least half of the samples it stands for came from
   the track), 0 elsewhere. A clip without sound is encoded as silence with a mask of zeros: its video trains, its
   audio part is left out of the loss (:func:`masked_audio_mse`), never learned as silence.

Clips of one bucket at different frame rates span different times, so the two tensors are cached ragged
(:data:`~dit_lora.data.text_padding.LENGTHS`): each entry keeps its own length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from dit_lora.core.errors import UserError
from dit_lora.data.audio import ClipAudio, decode_audio, log_mel
from dit_lora.data.text_padding import LENGTHS, pad_ragged

#: the STFT window of the audio VAE's spectrogram (Lightricks' LTX-2 audio processor: ``n_fft`` 1024 at 16 kHz)
N_FFT = 1024
#: the audio VAE's downsampling in time and in mel bins (diffusers' ``LATENT_DOWNSAMPLE_FACTOR``: fixed, not in
#: the config)
COMPRESSION = 4
#: the cache keys: packed normalised latents ``(L, C * M')`` and the per-step mask ``(L,)``, both ragged
LATENTS, MASK = "audio_latents", "audio_mask"


@dataclass(frozen=True)
class AudioGeometry:
    """What an audio VAE's config says about the audio it takes and the latents it gives."""

    sample_rate: int = 16000
    hop_length: int = 160
    mel_bins: int = 64
    channels: int = 2
    latent_channels: int = 8

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AudioGeometry:
        """From an ``AutoencoderKLLTX2Audio`` config (``sample_rate``, ``mel_hop_length``, ``mel_bins``,
        ``in_channels``, ``latent_channels``; diffusers' defaults where a key is missing)."""
        return cls(
            sample_rate=int(config.get("sample_rate", 16000)),
            hop_length=int(config.get("mel_hop_length", 160)),
            mel_bins=int(config.get("mel_bins") or 64),
            channels=int(config.get("in_channels", 2)),
            latent_channels=int(config.get("latent_channels", 8)),
        )

    @property
    def latents_per_second(self) -> float:
        """Latent time steps a second (16 kHz, hop 160: 25), as the pipeline computes ``audio_num_frames``."""
        return self.sample_rate / self.hop_length / COMPRESSION

    @property
    def samples_per_latent(self) -> int:
        """Waveform samples one latent time step stands for (640 at 16 kHz, hop 160)."""
        return self.hop_length * COMPRESSION

    @property
    def token_width(self) -> int:
        """Features of one packed token: latent channels x latent mel bins (8 x 16 = 128 for LTX-2)."""
        return self.latent_channels * (self.mel_bins // COMPRESSION)

    def latent_frames(self, seconds: float) -> int:
        """The pipeline's count for ``seconds`` of audio: ``round(seconds * latents_per_second)``, at least 1."""
        return max(1, round(seconds * self.latents_per_second))


def refuse_uniform(sampling: str, model: str) -> None:
    """Sound on with ``--frame_sampling uniform``: one paragraph (the frames would be sped up, their sound cannot)."""
    if sampling == "uniform":
        raise UserError(
            f"--frame_sampling uniform spreads a clip's frames over the whole clip, speeding its motion up by a factor "
            f"that differs per clip; {model} trains each clip's own sound with its frames, and a sped-up span has no "
            "sound to match. Use --frame_sampling first (the default: consecutive frames and their sound), or "
            "--audio off to train the video alone."
        )


def span_seconds(sample: Any) -> float | None:
    """Seconds of the clip its bucket's frames cover under ``--frame_sampling first`` (``frames / fps``), or None for
    an image or a clip whose container gives no frame rate (no sound is cut for it)."""
    if getattr(sample, "is_image", False) or not sample.bucket or sample.source_fps <= 0:
        return None
    return sample.bucket[0] / sample.source_fps


def clip_sound(sample: Any, geometry: AudioGeometry) -> tuple[ClipAudio | None, float]:
    """The clip's sound over its frames' span at the VAE's rate and channels (None: no track, an image, no frame
    rate) and the span's seconds (an image or an unknown rate: one frame at 25 per second)."""
    seconds = span_seconds(sample)
    if seconds is None:
        return None, 1.0 / geometry.latents_per_second
    return decode_audio(sample.path, 0.0, seconds, geometry.sample_rate, geometry.channels), seconds


def sound_mask(sound: ClipAudio | None, geometry: AudioGeometry, frames: int) -> torch.Tensor:
    """``(frames,)`` float32: 1 where at least half of a latent step's samples came from the track."""
    mask = torch.zeros(frames)
    if sound is None or sound.valid <= 0:
        return mask
    step = geometry.samples_per_latent
    starts = torch.arange(frames) * step
    first, last = sound.first_valid, sound.first_valid + sound.valid
    covered = (torch.clamp(starts + step, max=last) - torch.clamp(starts, min=first)).clamp(min=0)
    return (covered * 2 >= step).float()


def spectrogram(sound: ClipAudio | None, seconds: float, geometry: AudioGeometry) -> torch.Tensor:
    """``(channels, T, mel_bins)`` log-mel of the clip's sound, or of silence of the span's length without one."""
    if sound is None:
        waveform = torch.zeros(geometry.channels, max(1, round(seconds * geometry.sample_rate)))
    else:
        waveform = sound.waveform
    return log_mel(waveform, geometry.sample_rate, N_FFT, geometry.hop_length, geometry.mel_bins)


def encode_audio(vae, mel: torch.Tensor, frames: int) -> torch.Tensor:
    """``(B, channels, T, mel_bins)`` spectrograms -> ``(B, frames, C * M')``: the posterior's mode, packed and
    normalised as ``LTX2Pipeline`` packs and normalises given audio latents, its first ``frames`` steps (``vae``: an
    ``AutoencoderKLLTX2Audio``)."""
    with torch.no_grad():
        latents = vae.encode(mel.to(vae.device, vae.dtype)).latent_dist.mode()
    if latents.shape[2] < frames:
        raise ValueError(f"the audio VAE gave {latents.shape[2]} latent steps for a span that needs {frames}")
    packed = latents[:, :, :frames].transpose(1, 2).flatten(2, 3).float()  # (B, C, L, M') -> (B, L, C * M')
    mean = vae.latents_mean.to(packed.device, torch.float32)
    std = vae.latents_std.to(packed.device, torch.float32)
    return (packed - mean) / std


def audio_entries(vae, samples: list, geometry: AudioGeometry) -> dict[str, torch.Tensor]:
    """The cache entries of ``samples``' sound (module docstring): :data:`LATENTS` ``(B, L, C * M')`` and
    :data:`MASK` ``(B, L)``, each with its ragged lengths (padded with zeros to the longest of the batch here, cut to
    each entry's own length when cached)."""
    latents, masks = [], []
    for sample in samples:
        sound, seconds = clip_sound(sample, geometry)
        frames = geometry.latent_frames(seconds)
        mel = spectrogram(sound, seconds, geometry)
        latents.append(encode_audio(vae, mel[None], frames)[0].cpu())
        masks.append(sound_mask(sound, geometry, frames))
    lengths = torch.tensor([m.shape[0] for m in masks], dtype=torch.int64)
    return {
        LATENTS: pad_ragged(latents),
        LATENTS + LENGTHS: lengths,
        MASK: pad_ragged(masks),
        MASK + LENGTHS: lengths.clone(),
    }


def masked_audio_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, weighting: torch.Tensor):
    """The audio part of a joint loss, in fp32, a 0-d tensor: per sample the squared error averaged over its sounding
    steps (``mask`` ``(B, L)``: 1 where the track covered the step; ``pred``/``target`` ``(B, L, D)``), weighted,
    averaged over the samples that have any. A batch without sound gives 0 with no gradient to the audio branch; no
    value is read on the host."""
    mask = mask.float()
    per_step = ((pred.float() - target.float()) ** 2).mean(-1)
    steps = mask.sum(1)
    per_sample = (per_step * mask).sum(1) / steps.clamp(min=1.0)
    sounding = (steps > 0).float()
    return (weighting.float() * per_sample * sounding).sum() / sounding.sum().clamp(min=1.0)
