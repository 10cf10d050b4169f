"""What a Wan checkpoint's small config files say (version, task, experts, geometry, trained size, shift), read
before any weight loads (read once per folder), and the task a run trains (:class:`WanTask`: text- or
image-to-video, the trained expert(s), the TI2V image-mode fraction, the clip buckets, the frame rate). See
:mod:`.spec` for the family itself.

Sources (diffusers 0.42.1 unless named): ``WanPipeline`` / ``WanImageToVideoPipeline`` (``boundary_ratio`` and
``expand_timesteps`` are pipeline config keys in ``model_index.json``; ``transformer`` handles timesteps
``>= boundary_ratio * num_train_timesteps`` and ``transformer_2`` the rest; ``vae_scale_factor_temporal`` /
``_spatial`` come from the VAE config's ``scale_factor_temporal`` / ``scale_factor_spatial``); prompt length 512
UMT5 tokens (the pipelines' ``max_sequence_length`` default and Wan's ``shared_config.text_len``); frame rates
and trained sizes from the Wan-Video/Wan2.1 and Wan2.2 READMEs and ``generate.py`` (2.1 and 2.2 A14B: 16 fps,
81 frames, 480 x 832 or 720 x 1280; 2.2 TI2V-5B: 24 fps, 121 frames, 704 x 1280); the family catalogue
(:mod:`.catalogue`) records the per-checkpoint values with their sources.
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config.schema import ModelOptions
from dit_lora.core.errors import UserError
from dit_lora.families.wan.catalogue import default_size
from dit_lora.families.wan.options import WanOptions
from dit_lora.kit.info_cache import ClipGeometry, InfoCache, VideoTask, clip_geometry

T2V_PIPELINE = "WanPipeline"
I2V_PIPELINE = "WanImageToVideoPipeline"
EXAMPLE_IDS = {"t2v": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "i2v": "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers"}
FAMILY_FOR = {"t2v": "wan", "i2v": "wan_i2v"}
KIND = {"t2v": "text-to-video", "i2v": "image-to-video", "ti2v": "text-and-image-to-video (TI2V)"}
#: UMT5 tokens every prompt is padded to (WanPipeline.encode_prompt's max_sequence_length; Wan's text_len)
TEXT_LEN = 512
#: where each expert's adapter goes in the output folder, and which pipeline transformer loads it
EXPERT_FILES = {"high": "pytorch_lora_weights.safetensors", "low": "pytorch_lora_weights_low_noise.safetensors"}
EXPERT_TARGET = {"high": "transformer", "low": "transformer_2"}
#: the file a finished run writes naming the expert of each adapter file (export and cards read it)
EXPERTS_FILE = "dit_lora_wan_experts.json"
#: latent token ratios outside which a requested size is refused without --allow_untrained_resolution
MAX_TOKEN_RATIO, MIN_TOKEN_RATIO = 2.0, 1 / 64


@dataclass(frozen=True)
class WanInfo(ClipGeometry):
    """What the small config files say about a Wan checkpoint (diffusers' defaults where unreadable): the VAE's and
    the transformer's geometry (:class:`~dit_lora.kit.info_cache.ClipGeometry`: ``z_dim``, the VAE
    latent channels, is 16 for 2.1 and 2.2 A14B and 48 for 2.2 TI2V-5B, whose ``vae_spatial`` is 16) and these."""

    pipeline_class: str | None = None
    kind: str | None = None  #: "t2v", "i2v", "ti2v" (2.2 5B: both modes) or None (configs unreadable)
    evidence: str = ""
    in_channels: int = 16
    two_experts: bool = False  #: Wan 2.2 A14B: transformer (high noise) + transformer_2 (low noise)
    boundary_ratio: float | None = None
    expand_timesteps: bool = False  #: per-token timesteps (TI2V-5B)
    image_encoder: bool = False  #: 2.1 I2V: a CLIP image embedding enters the cross-attention
    flow_shift: float = 3.0
    layers: int = 30

    @property
    def version(self) -> str:
        """ "2.2" for the two-expert and TI2V checkpoints, else "2.1" (the configs carry no version field)."""
        return "2.2" if (self.two_experts or self.expand_timesteps) else "2.1"

    @property
    def fps(self) -> int:
        """Frames per second the checkpoint generates at (TI2V-5B 24, the others 16)."""
        return 24 if self.expand_timesteps else 16

    def trained_size(self) -> tuple[int, int, int, str]:
        """``(frames, height, width, why)``: the default training size (:func:`.catalogue.default_size`, which the
        catalogue entries list as their defaults)."""
        return default_size(self.expand_timesteps)

    def largest_trained_size(self) -> tuple[int, int, int, str]:
        """``(frames, height, width, why)``: the largest size the checkpoint generates at (the size check's
        reference)."""
        if self.expand_timesteps:
            return self.trained_size()
        return 81, 720, 1280, "the 720p size the Wan 14B and A14B checkpoints generate at"

    def latent_tokens(self, frames: int, height: int, width: int) -> int:
        """Transformer tokens of one clip: latent frames x (h / patch) x (w / patch)."""
        f = (frames - 1) // self.vae_temporal + 1
        return (f // self.patch[0]) * (height // self.size_multiple) * (width // self.size_multiple)

    def expert_boundary(self, model: str | None) -> float:
        """``boundary_ratio`` of a two-expert checkpoint (``model``: its name, for the refusal when it has none)."""
        if self.boundary_ratio is None:
            raise UserError(
                f"`{model}`: model_index.json names two transformers (transformer and transformer_2) but no "
                "boundary_ratio, the fraction of the timestep range where Wan 2.2 A14B hands over from the "
                "high-noise to the low-noise expert (diffusers then runs transformer alone), so there is no split to "
                "train the experts on. Add the checkpoint's boundary_ratio to model_index.json (Wan-AI's T2V-A14B: "
                "0.875, I2V-A14B: 0.9), or remove transformer_2 from it to train transformer alone."
            )
        return self.boundary_ratio

    def describe(self) -> str:
        """One line for logs and the model card."""
        parts = [
            f"Wan {self.version} {KIND.get(self.kind or '', 'unknown task')}",
            f"{self.layers} layers",
            f"VAE {self.z_dim} channels ({self.vae_spatial}x spatial)",
            f"flow shift {self.flow_shift:g}",
        ]
        if self.two_experts:
            parts.append(f"two experts split at boundary_ratio {self.boundary_ratio:g}")
        if self.image_encoder:
            parts.append("CLIP image embedding")
        return ", ".join(parts)


def wan_info(model: ModelOptions) -> WanInfo:
    """Read ``model_index.json`` and the transformer, VAE and scheduler configs (small files only), through the
    catalogue's reader (a catalogued Hub id not downloaded yet reads its published configs)."""
    read = config_reader(model)
    index = read("", "model_index.json") or {}
    tr = read("transformer", "config.json") or read("transformer_2", "config.json") or {}
    vae = read("vae", "config.json") or {}
    sched = read("scheduler", "scheduler_config.json") or {}
    geometry = clip_geometry(tr, vae, sched)
    z_dim = geometry["z_dim"]
    in_ch = int(tr.get("in_channels", z_dim))
    expand = bool(index.get("expand_timesteps", False))
    kind, evidence = None, ""
    if tr:
        if in_ch == z_dim:
            kind = "ti2v" if expand else "t2v"
        elif in_ch == 2 * z_dim + 4:
            kind = "i2v"
        evidence = f"transformer in_channels {in_ch}, VAE z_dim {z_dim}" + (", expand_timesteps" if expand else "")
    two = index.get("transformer_2") not in (None, [None, None]) and index.get("transformer") not in (
        None,
        [None, None],
    )
    boundary = index.get("boundary_ratio")
    image_encoder = index.get("image_encoder") not in (None, [None, None]) and "image_encoder" in index
    return WanInfo(
        pipeline_class=index.get("_class_name"),
        kind=kind,
        evidence=evidence,
        in_channels=in_ch,
        two_experts=bool(two),
        boundary_ratio=float(boundary) if boundary is not None else None,
        expand_timesteps=expand,
        image_encoder=bool(image_encoder),
        flow_shift=float(sched.get("flow_shift") or sched.get("shift") or 3.0),
        layers=int(tr.get("num_layers", 30)),
        **geometry,
    )


#: :func:`wan_info`, read once per model path, revision and (local folders) config files' modification times
cached_wan_info = InfoCache(wan_info)
#: drop the configs read so far (``--demo`` has just rewritten the model folder)
forget_infos = cached_wan_info.forget


@dataclass(frozen=True)
class WanTask(VideoTask):
    """``FamilySpec.video_frames`` and ``frame_rate``: one of the two Wan families (``wan``: text-to-video, ``wan_i2v``:
    image-to-video) and what it reads from the checkpoint (:func:`cached_wan_info`); every other component holds it.
    Its clip buckets are the kit's (:meth:`~dit_lora.kit.info_cache.VideoTask.video_buckets`: Wan has
    no temporal patch, ``patch_size_t`` None), around the default size (:meth:`WanInfo.trained_size`)."""

    #: the checkpoint kinds this family trains
    kinds: tuple[str, ...]
    infos, label = cached_wan_info, "Wan"

    def expert(self, model: ModelOptions, options: WanOptions) -> str | None:
        """The trained expert(s) of a two-expert checkpoint (``--wan_expert``, default ``both``); None otherwise
        (``model``, ``options``: the run's ``cfg.model`` and ``cfg.family_options``)."""
        if not self.info(model).two_experts:
            return None
        return options.wan_expert or "both"

    def image_probability(self, model: ModelOptions, options: WanOptions) -> float:
        """TI2V-5B: the fraction of samples trained in image mode (0 for other checkpoints; ``model``, ``options``:
        the run's ``cfg.model`` and ``cfg.family_options``)."""
        if self.info(model).kind != "ti2v":
            return 0.0
        p = options.ti2v_image_probability
        return float(p) if p is not None else (1.0 if self.task == "i2v" else 0.0)
