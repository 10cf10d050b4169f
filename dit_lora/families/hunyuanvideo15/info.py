"""What a HunyuanVideo 1.5 checkpoint's small config files say, and the run's clip buckets, read before anything loads.

Facts (diffusers 0.42.1 ``pipelines/hunyuan_video1_5`` and ``scripts/convert_hunyuan_video1_5_to_diffusers.py``):
the published checkpoints pair one ``HunyuanVideo15Transformer3DModel`` (8.3B: 54 dual-stream blocks of 16 x 128,
patch 1, an input of 65 channels: the latents, the condition latents and their mask) with
``AutoencoderKLHunyuanVideo15`` (32 channels, 16x spatial, 4x temporal; latents multiplied by its
``scaling_factor``, 1.03682), ``Qwen2_5_VLTextModel`` (Qwen2.5-VL-7B's language model: 1,000 tokens after the 108 of
the system prompt, ``hidden_states[-3]``) and ByT5 (256 tokens, the prompt's quoted text only); the image-to-video
checkpoints add SigLIP (729 tokens of 1152). 480p checkpoints sample with shift 5, the 720p text-to-video with 9 and
image-to-video with 7; the pipelines generate 121 frames, written at 24 fps. The transformer config's
``target_size`` (640 at 480p, 960 at 720p) sizes the image-to-video pipeline's video from the image's aspect.
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config.schema import ModelOptions
from dit_lora.kit.info_cache import ClipGeometry, InfoCache, VideoTask, clip_geometry

T2V_PIPELINE = "HunyuanVideo15Pipeline"
I2V_PIPELINE = "HunyuanVideo15ImageToVideoPipeline"
EXAMPLE_ID = "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v"
#: frames and fps the pipelines generate at (their ``num_frames`` default; the examples export at 24 fps)
TRAINED = {"frames": 121, "fps": 24}
#: the 16:9 training size of each ``target_size`` (the pipelines' 480p and 720p buckets)
SIZES = {640: (480, 848), 960: (720, 1280)}


@dataclass(frozen=True)
class HunyuanVideo15Info(ClipGeometry):
    """What the configs say about a HunyuanVideo 1.5 checkpoint (diffusers' defaults where a file is unreadable): the
    VAE's and the transformer's geometry (:class:`~dit_lora.kit.info_cache.ClipGeometry`) and these."""

    z_dim: int = 32
    vae_spatial: int = 16
    patch: tuple[int, int, int] = (1, 1, 1)
    target_size: int = 640
    #: the checkpoint scheduler's shift (its sampling shift)
    scheduler_shift: float = 5.0
    layers: int = 54
    #: the transformer's ``use_meanflow`` (the step-distilled checkpoints: one more timestep input)
    meanflow: bool = False
    fps: float = float(TRAINED["fps"])

    def trained_size(self) -> tuple[int, int, int]:
        """``(frames, height, width)`` the checkpoint generates at: 121 frames at its target size's 16:9 bucket."""
        height, width = SIZES.get(self.target_size, SIZES[640])
        return TRAINED["frames"], height, width

    def describe(self) -> str:
        """One line for logs and the model card."""
        return (
            f"HunyuanVideo 1.5, {self.layers} blocks, AutoencoderKLHunyuanVideo15 {self.z_dim} channels "
            f"({self.vae_spatial}x spatial, {self.vae_temporal}x temporal), target size {self.target_size}"
        )


def read_info(model: ModelOptions) -> HunyuanVideo15Info:
    """The model's transformer, VAE and scheduler configs, through the catalogue's reader (a catalogued Hub id that
    is not downloaded reads its published configs)."""
    read = config_reader(model)
    tr = read("transformer", "config.json") or {}
    vae = read("vae", "config.json") or {}
    sched = read("scheduler", "scheduler_config.json") or {}
    geometry = clip_geometry({"patch_size": (tr.get("patch_size_t", 1), *(2 * [tr.get("patch_size", 1)]))}, {}, sched)
    return HunyuanVideo15Info(
        **{
            **geometry,
            "z_dim": int(vae.get("latent_channels", 32)),
            "vae_spatial": int(vae.get("spatial_compression_ratio", 16)),
            "vae_temporal": int(vae.get("temporal_compression_ratio", 4)),
        },
        target_size=int(tr.get("target_size", 640)),
        scheduler_shift=float(sched.get("shift") or 5.0),
        layers=int(tr.get("num_layers", 54)),
        meanflow=bool(tr.get("use_meanflow", False)),
    )


#: :func:`read_info`, once per model path, revision and (local folders) config files' modification times
cached_info = InfoCache(read_info)
#: drop the configs read so far (``--demo`` has just rewritten the model folder)
forget_infos = cached_info.forget


@dataclass(frozen=True)
class HunyuanVideo15Task(VideoTask):
    """``FamilySpec.video_frames`` and ``frame_rate``: one of the two HunyuanVideo 1.5 families (``hunyuanvideo15``:
    text-to-video, ``hunyuanvideo15_i2v``: image-to-video) and what it reads from the checkpoint."""

    infos, label = cached_info, "HunyuanVideo 1.5"

    @property
    def mode(self) -> str:
        """The task as the start notes say it."""
        if self.task == "i2v":
            return "image-to-video (the first frame's latent and mask as condition channels, SigLIP image tokens)"
        return "text-to-video"
