"""What a SANA-Video checkpoint's small config files say, and the run's clip buckets, read before anything loads.

Facts (diffusers 0.42.1 ``pipelines/sana_video`` and ``scripts/convert_sana_video_to_diffusers.py``; NVlabs/Sana
``configs/sana_video_config/Sana_2000M_480px_AdamW_fsdp.yaml``): the 2B 480p release pairs a
``SanaVideoTransformer3DModel`` (20 blocks of ReLU linear attention with Wan's 3D RoPE, Sana's softmax
cross-attention and a GLUMB conv feed-forward with a temporal conv, patch ``(1, 2, 2)``, ``sample_size`` 30) with
the Wan 2.1 VAE (``AutoencoderKLWan``: 16 channels, 8x spatial, 4x temporal; latents normalised by its
``latents_mean`` / ``latents_std``, which the pipelines apply) and Gemma-2-2B-it (``Gemma2Model``, 300 tokens, the
complex human instruction). The pipelines generate 81 frames at 480 x 832 and write them at 16 fps; the same
checkpoint animates a first frame with ``SanaImageToVideoPipeline`` (the first latent frame clean, timestep 0 on
its tokens). Other VAEs the pipelines accept (DC-AE-V, LTX-2's) are refused here: no published diffusers
SANA-Video checkpoint ships them, so their latent normalisation cannot be checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config.schema import ModelOptions
from dit_lora.kit.info_cache import ClipGeometry, InfoCache, VideoTask, clip_geometry

T2V_PIPELINE = "SanaVideoPipeline"
I2V_PIPELINE = "SanaImageToVideoPipeline"
EXAMPLE_ID = "Efficient-Large-Model/SANA-Video_2B_480p_diffusers"
#: the pipelines' aspect-ratio tables exist for these transformer sample sizes only (480p, 720p)
BINNED_SAMPLE_SIZES = {30: 480, 22: 720}
#: frames, height, width and fps the 480p release generates at (the pipelines' defaults and examples)
TRAINED = {"frames": 81, "height": 480, "width": 832, "fps": 16}


@dataclass(frozen=True)
class SanaVideoInfo(ClipGeometry):
    """What the configs say about a SANA-Video checkpoint (diffusers' defaults where a file is unreadable): the Wan
    VAE's and the transformer's geometry (:class:`~dit_lora.kit.info_cache.ClipGeometry`) and these."""

    vae_class: str = "AutoencoderKLWan"
    sample_size: int = 30
    #: the checkpoint scheduler's shift (the sampling shift: 8.0 as diffusers' conversion writes it)
    scheduler_shift: float = 8.0
    layers: int = 20

    def trained_size(self) -> tuple[int, int, int]:
        """``(frames, height, width)`` the checkpoint generates at (720p: the 720p table's 1280-wide size)."""
        if BINNED_SAMPLE_SIZES.get(self.sample_size) == 720:
            return TRAINED["frames"], 720, 1280
        return TRAINED["frames"], TRAINED["height"], TRAINED["width"]

    def describe(self) -> str:
        """One line for logs and the model card."""
        return (
            f"SANA-Video, {self.layers} blocks, {self.vae_class} {self.z_dim} channels ({self.vae_spatial}x "
            f"spatial, {self.vae_temporal}x temporal), patch {'x'.join(map(str, self.patch))}"
        )


def read_info(model: ModelOptions) -> SanaVideoInfo:
    """The model's ``model_index.json``, transformer, VAE and scheduler configs, through the catalogue's reader (a
    catalogued Hub id that is not downloaded reads its published configs)."""
    read = config_reader(model)
    index = read("", "model_index.json") or {}
    tr = read("transformer", "config.json") or {}
    vae = read("vae", "config.json") or {}
    sched = read("scheduler", "scheduler_config.json") or {}
    vae_entry = index.get("vae") or [None, vae.get("_class_name", "AutoencoderKLWan")]
    return SanaVideoInfo(
        vae_class=str(vae.get("_class_name") or vae_entry[1]),
        sample_size=int(tr.get("sample_size", 30)),
        scheduler_shift=float(sched.get("flow_shift") or sched.get("shift") or 8.0),
        layers=int(tr.get("num_layers", 20)),
        **clip_geometry(tr, vae, sched),
    )


#: :func:`read_info`, once per model path, revision and (local folders) config files' modification times
cached_info = InfoCache(read_info)
#: drop the configs read so far (``--demo`` has just rewritten the model folder)
forget_infos = cached_info.forget


@dataclass(frozen=True)
class SanaVideoTask(VideoTask):
    """``FamilySpec.video_frames`` and ``frame_rate``: one of the two SANA-Video families (``sanavideo``: text-to-video,
    ``sanavideo_i2v``: image-to-video) and what it reads from the checkpoint (:func:`cached_info`)."""

    infos, label = cached_info, "SANA-Video"

    def model_fps(self, model: ModelOptions) -> float:
        """The rate the pipelines' examples write videos at (16 fps; NVlabs' data keeps the clips' own rate)."""
        return float(TRAINED["fps"])
