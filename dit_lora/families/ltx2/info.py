"""What an LTX-2 checkpoint's small config files say, and the run's clip buckets, read before anything loads.

Facts (diffusers 0.42.1 ``pipelines/ltx2/pipeline_ltx2.py`` and ``scripts/convert_ltx2_to_diffusers.py``): LTX-2 pairs
an ``LTX2VideoTransformer3DModel`` (48 blocks, each a video stream of 32 x 128 heads and an audio stream of 32 x 64,
with attention between them; patch 1) with the ``AutoencoderKLLTX2Video`` (128 channels, 32x spatial, 8x temporal,
latents normalised by its ``latents_mean`` / ``latents_std`` buffers), the ``AutoencoderKLLTX2Audio`` (a log-mel
spectrogram at 16 kHz, hop 160, compressed 4x in time and mel bins: 25 latent steps a second), ``LTX2TextConnectors``
over every hidden state of Gemma-3-12B, and a vocoder. ``LTX2Pipeline`` generates 121 frames at 512 x 768 and
24 fps by default, with the sound of the clip's span (``round(frames / fps * 25)`` latent steps).
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config.schema import ModelOptions
from dit_lora.kit.clip_audio import AudioGeometry
from dit_lora.kit.info_cache import ClipGeometry, InfoCache, VideoTask

PIPELINE = "LTX2Pipeline"
I2V_PIPELINE = "LTX2ImageToVideoPipeline"
#: in-context generation (IC-LoRA: a reference clip beside the clip)
IC_PIPELINE = "LTX2InContextPipeline"
EXAMPLE_ID = "Lightricks/LTX-2"
#: frames, height, width and fps ``LTX2Pipeline`` generates at by default
TRAINED = {"frames": 121, "height": 512, "width": 768, "fps": 24}
#: the files the facts are read from (a rebuilt folder changes their modification times)
CONFIG_FILES = (
    "model_index.json",
    "transformer/config.json",
    "vae/config.json",
    "audio_vae/config.json",
    "scheduler/scheduler_config.json",
)
#: what each of the video VAE's ``downsample_type`` blocks compresses: (time, space)
DOWNSAMPLES = {"spatial": (1, 2), "temporal": (2, 1), "spatiotemporal": (2, 2), "conv": (2, 2)}


def vae_compression(vae: dict) -> tuple[int, int]:
    """``(temporal, spatial)`` compression of an ``AutoencoderKLLTX2Video`` config: its ``*_compression_ratio``
    where written (the published configs), else its patch times each scaling block's factor (as the class computes
    them)."""
    temporal, spatial = int(vae.get("patch_size_t", 1)), int(vae.get("patch_size", 4))
    scaling = vae.get("spatio_temporal_scaling", (True, True, True, True))
    for kind, scales in zip(
        vae.get("downsample_type", ("spatial", "temporal", "spatiotemporal", "spatiotemporal")), scaling
    ):
        if scales:
            t, s = DOWNSAMPLES.get(kind, (2, 2))
            temporal, spatial = temporal * t, spatial * s
    return (
        int(vae.get("temporal_compression_ratio") or temporal),
        int(vae.get("spatial_compression_ratio") or spatial),
    )


@dataclass(frozen=True)
class LTX2Info(ClipGeometry):
    """What the configs say about an LTX-2 checkpoint (diffusers' defaults where a file is unreadable): the video
    VAE's and the transformer's geometry and these."""

    layers: int = 48
    #: the audio VAE's rate, hop, mel bins and channels
    audio: AudioGeometry = AudioGeometry()
    #: the transformer's features of one packed audio token (``audio_in_channels``)
    audio_width: int = 128

    def trained_size(self) -> tuple[int, int, int]:
        """``(frames, height, width)`` ``LTX2Pipeline`` generates at by default."""
        return TRAINED["frames"], TRAINED["height"], TRAINED["width"]

    @property
    def fps(self) -> float:
        """The pipeline's default frame rate."""
        return float(TRAINED["fps"])

    def describe(self) -> str:
        """One line for logs and the model card."""
        return (
            f"LTX-2, {self.layers} blocks, video VAE {self.z_dim} channels ({self.vae_spatial}x spatial, "
            f"{self.vae_temporal}x temporal), audio VAE at {self.audio.sample_rate} Hz "
            f"({self.audio.latents_per_second:g} latent steps a second)"
        )


def read_info(model: ModelOptions) -> LTX2Info:
    """The model's transformer, VAE, audio VAE and scheduler configs, through the catalogue's reader (a catalogued
    Hub id that is not downloaded reads its published configs)."""
    read = config_reader(model)
    tr = read("transformer", "config.json") or {}
    vae = read("vae", "config.json") or {}
    audio = read("audio_vae", "config.json") or {}
    sched = read("scheduler", "scheduler_config.json") or {}
    temporal, spatial = vae_compression(vae)
    return LTX2Info(
        z_dim=int(vae.get("latent_channels", 128)),
        vae_spatial=spatial,
        vae_temporal=temporal,
        patch=(int(tr.get("patch_size_t", 1)), int(tr.get("patch_size", 1)), int(tr.get("patch_size", 1))),
        num_train_timesteps=int(sched.get("num_train_timesteps", 1000)),
        layers=int(tr.get("num_layers", 48)),
        audio=AudioGeometry.from_config(audio),
        audio_width=int(tr.get("audio_in_channels", 128)),
    )


#: :func:`read_info`, once per model path, revision and (local folders) config files' modification times
cached_info = InfoCache(read_info, CONFIG_FILES)
#: drop the configs read so far (``--demo`` has just rewritten the model folder)
forget_infos = cached_info.forget


@dataclass(frozen=True)
class LTX2Task(VideoTask):
    """``FamilySpec.video_frames`` and ``frame_rate``: one of the two LTX-2 families (``ltx2``: text-to-video,
    ``ltx2_i2v``: image-to-video, the same checkpoint) and what it reads from the checkpoint."""

    infos, label = cached_info, "LTX-2"
