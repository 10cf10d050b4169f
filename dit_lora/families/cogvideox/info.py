"""What a CogVideoX checkpoint's small config files say (version, task, geometry, trained size), read before
any weight loads (:class:`ModelInfo`, read once per folder), the latent-shape helpers both CogVideoX families use,
and the video sizes a run trains at (:class:`CogVideoXVideo`): the ``(frames, height, width)`` buckets (the trained
size and automatic aspect buckets, or ``--frame_buckets``), the checks that refuse sizes the model cannot run or
was never trained near, and the frame rate. See :mod:`.cogvideox` for the family itself."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypedDict, cast

import torch

from dit_lora.catalogue import match
from dit_lora.catalogue.defaults import config_reader
from dit_lora.config import TrainConfig
from dit_lora.config.schema import ModelOptions
from dit_lora.core.errors import UserError
from dit_lora.data.frames import automatic_buckets, check_num_frames, latent_frames, latent_padding, resolution_buckets
from dit_lora.kit.info_cache import InfoCache

T2V_PIPELINES = ("CogVideoXPipeline", "CogVideoXVideoToVideoPipeline")  # same text-to-video weights
I2V_PIPELINE = "CogVideoXImageToVideoPipeline"
EXAMPLE_IDS = {"t2v": "THUDM/CogVideoX-5b", "i2v": "THUDM/CogVideoX-5b-I2V"}
FAMILY_FOR = {"t2v": "cogvideox", "i2v": "cogvideox_i2v"}
KIND = {"t2v": "text-to-video", "i2v": "image-to-video"}
#: frame rates the CogVideoX releases generate at (1.0: 49 frames at 8 fps; 1.5: 81 at 16 fps)
FPS_1_0, FPS_1_5 = 8, 16
#: the ofs value CogVideoXImageToVideoPipeline passes to 1.5 I2V
OFS_VALUE = 2.0
#: A requested size is refused (without --allow_untrained_resolution) when its latent tokens per clip are
#: above MAX_TOKEN_RATIO or below MIN_TOKEN_RATIO times those of the checkpoint's trained size.
MAX_TOKEN_RATIO, MIN_TOKEN_RATIO = 2.0, 0.25


@dataclass(frozen=True)
class ModelInfo:
    """What the small config files say about a CogVideoX checkpoint (diffusers' defaults when unreadable)."""

    pipeline_class: str | None = None
    task: str | None = None  # "t2v", "i2v" or None (configs unreadable)
    evidence: str = ""
    vae_spatial: int = 8  # 2 ** (len(vae block_out_channels) - 1)
    temporal: int = 4  # VAE temporal_compression_ratio
    patch_size: int = 2
    patch_size_t: int | None = None
    sample_frames: int = 49  # pixel frames
    sample_height: int = 60  # latent pixels
    sample_width: int = 90
    max_text_seq_length: int = 226
    rope: bool = False
    learned_positions: bool = False
    ofs: bool = False
    #: ``(frames, height, width, why)`` of the catalogue entry whose published config this is
    published: tuple[int, int, int, str] | None = None

    @property
    def spatial_multiple(self) -> int:
        return self.vae_spatial * self.patch_size

    @property
    def size_multiple(self) -> int:
        """What a trained height/width must be a multiple of: the latent patch, and the 8 the CogVideoX pipelines'
        ``check_inputs`` require of the samples' height and width."""
        return math.lcm(self.spatial_multiple, PIPELINE_MULTIPLE)

    @property
    def fps(self) -> int:
        return FPS_1_5 if self.patch_size_t else FPS_1_0

    def trained_size(self) -> tuple[int, int, int, str]:
        """``(frames, height, width, why)``: the size this checkpoint was trained at, in pixel frames and pixels.

        A catalogued config (``families/cogvideox/catalogue.json``, matched by content) gets the size THUDM
        documents for it: for 1.0 that is what its config's ``sample_*`` fields say, for 1.5 it is not (they
        hold the RoPE grid's 2400 px extent, which diffusers' pipelines would take as their default size). Any
        other config (a fine-tune that wrote its own, the tiny demo models) has no other record of its size than
        ``sample_frames`` and ``sample_height`` / ``sample_width`` x the VAE's factor, which is also what
        diffusers' pipelines default to; the tiny builder writes its trained geometry there.
        """
        if self.published is not None:
            return self.published
        height, width = self.sample_height * self.vae_spatial, self.sample_width * self.vae_spatial
        return (
            self.sample_frames,
            height,
            width,
            f"not a catalogued CogVideoX config, so its own transformer/config.json sample size "
            f"{self.sample_height}x{self.sample_width} latent px x {self.vae_spatial} and sample_frames "
            f"{self.sample_frames}",
        )

    def latent_tokens(self, frames: int, height: int, width: int) -> int:
        """Transformer tokens of one ``frames`` x ``height`` x ``width`` clip (latent frames padded like the pipeline)."""
        count = latent_frames(frames, temporal_compression=self.temporal)
        count += latent_padding(frames, temporal_compression=self.temporal, patch_size_t=self.patch_size_t)
        count //= self.patch_size_t or 1
        return count * (height // self.spatial_multiple) * (width // self.spatial_multiple)

    def describe(self) -> str:
        if self.patch_size_t:
            text = (
                f"CogVideoX 1.5 (RoPE, patch_size_t {self.patch_size_t}: latent frames padded to a multiple "
                f"of {self.patch_size_t} by repeating the first" + ("; ofs embedding" if self.ofs else "") + ")"
            )
        elif self.rope:
            text = (
                "CogVideoX 1.0, 5B-style (RoPE" + ("; learned position table" if self.learned_positions else "") + ")"
            )
        else:
            text = "CogVideoX 1.0, 2B-style (3D sin-cos positions)"
        return text


def model_info(model: ModelOptions) -> ModelInfo:
    """Read ``model_index.json``, the transformer and VAE configs (small files only).

    Through the catalogue's reader: a catalogued Hub id not yet downloaded reads its published configs.
    """
    read = config_reader(model)
    index = read("", "model_index.json") or {}
    tr = read("transformer", "config.json") or {}
    vae = read("vae", "config.json") or {}
    pipeline_class = index.get("_class_name")
    task, evidence = None, ""
    if tr and vae:
        in_ch, latent = int(tr.get("in_channels", 16)), int(vae.get("latent_channels", 16))
        task = {latent: "t2v", 2 * latent: "i2v"}.get(in_ch)
        evidence = (
            f"transformer/config.json in_channels {in_ch} = "
            + ("the VAE's" if task == "t2v" else "2 x the VAE's")
            + f" {latent} latent channels"
        )
    if pipeline_class in T2V_PIPELINES + (I2V_PIPELINE,):
        named = "i2v" if pipeline_class == I2V_PIPELINE else "t2v"
        task = task or named
        evidence = f"model_index.json names {pipeline_class}" + (f"; {evidence}" if evidence else "")
    published = _published_size(model, task) if tr else None
    sample = {}
    for key in ("sample_frames", "sample_height", "sample_width", "patch_size", "max_text_seq_length"):
        if tr.get(key) is not None:
            sample[key] = int(tr[key])
    return ModelInfo(
        pipeline_class=pipeline_class,
        task=task,
        evidence=evidence,
        vae_spatial=2 ** (len(vae.get("block_out_channels", [0] * 4)) - 1),
        temporal=int(vae.get("temporal_compression_ratio", tr.get("temporal_compression_ratio", 4))),
        patch_size_t=tr.get("patch_size_t"),
        rope=bool(tr.get("use_rotary_positional_embeddings", False)),
        learned_positions=bool(tr.get("use_learned_positional_embeddings", False)),
        ofs=bool(tr.get("ofs_embed_dim")),
        published=published,
        **sample,
    )


def _published_size(model: ModelOptions, task: str | None) -> tuple[int, int, int, str] | None:
    """The documented training size of the catalogue entry this model's configs match, if any."""
    entry = match(FAMILY_FOR.get(task or "t2v", "cogvideox"), config_reader(model))
    if entry is None or "frames" not in entry.trained:
        return None
    t = entry.trained
    extra = f"; {entry.notes}" if entry.notes else ""
    return (
        t["frames"],
        t["height"],
        t["width"],
        f"the published config of {entry.hub_id}, documented at {entry.trained_text()}{extra}",
    )


def transformer_config(model: torch.nn.Module) -> Any:
    """The loaded transformer's diffusers config. Untyped: a diffusers config holds its keys as attributes."""
    return cast(Any, model).config


def pad_latent_frames(latents: torch.Tensor, patch_size_t: int | None) -> torch.Tensor:
    """``(B, F, C, h, w)`` -> prepend copies of frame 0 until ``patch_size_t`` divides F (the pipeline's count)."""
    if not patch_size_t or latents.shape[1] % patch_size_t == 0:
        return latents
    extra = patch_size_t - latents.shape[1] % patch_size_t
    return torch.cat([latents[:, :1].expand(-1, extra, -1, -1, -1), latents], dim=1)


def check_latent_size(vae, pixel_size, latent_size) -> None:
    """Refuse latents whose size is not pixels / the VAE's factor: diffusers' tiled encode miscounts when its
    tile overlap is no multiple of that factor (tiny VAEs, whose 32 px tiles overlap by 26 px)."""
    factor = 2 ** (len(vae.config.block_out_channels) - 1)
    expected = tuple(int(v) // factor for v in pixel_size)
    if tuple(latent_size) != expected:
        raise UserError(
            f"The VAE encoded {pixel_size[0]}x{pixel_size[1]} px frames to {latent_size[0]}x{latent_size[1]} latents "
            f"instead of {expected[0]}x{expected[1]}: its tiled encoding (tiles of {vae.tile_sample_min_height}x"
            f"{vae.tile_sample_min_width} px) does not fit this size. Set --enable_tiling false."
        )


#: CogVideoX(Image/Video)Pipeline.check_inputs: "`height` and `width` have to be divisible by 8"
PIPELINE_MULTIPLE = 8


def check_size_multiple(flag: str, value: int, multiple: int, info: ModelInfo) -> None:
    """Refuse a height/width that is not a multiple of ``multiple`` (:attr:`ModelInfo.size_multiple`), suggesting
    the nearest sizes that are (each accepted by the model and by its pipeline)."""
    if value % multiple:
        lower, upper = value // multiple * multiple, (value // multiple + 1) * multiple
        raise UserError(
            f"{flag} {value} is not a multiple of {multiple} (the VAE's {info.vae_spatial}x downsampling times "
            f"patch size {info.patch_size}, and the pipeline's {PIPELINE_MULTIPLE} for the samples). "
            f"Use {' or '.join(str(v) for v in (lower, upper) if v > 0)}."
        )


#: ``model_info`` by (model, revision, local config files' mtimes): Hub reads cost a request each


class FrameRule(TypedDict):
    """CogVideoX's frame rule, as the keyword arguments of ``check_num_frames`` and ``resolution_buckets``."""

    temporal_compression: int
    patch_size_t: int | None
    pad_latent_frames: bool


#: :func:`~.info.model_info`, read once per model path, revision and (local folders) config files' modification
#: times, so a rebuilt model is read again
cached_model_info = InfoCache(model_info)
#: drop every cached :class:`~.info.ModelInfo` (``--demo`` may have just rebuilt the model)
forget_model_infos = cached_model_info.forget


def rope_limit(info: ModelInfo) -> tuple[int, int] | None:
    """The largest (height, width) in px CogVideoX 1.5's RoPE takes (its ``grid_type="slice"`` table of
    ``sample_height`` x ``sample_width`` latent px, ``_prepare_rotary_positional_embeddings``); None for 1.0,
    whose RoPE crops a grid of any size."""
    if not info.patch_size_t or not info.rope:
        return None
    return info.sample_height * info.vae_spatial, info.sample_width * info.vae_spatial


def size_flags(cfg: TrainConfig) -> str:
    """The flags that set the run's video size, for messages."""
    if cfg.video.frame_buckets:
        return "--frame_buckets"
    given = [f"--{name}" for name in ("height", "width", "max_num_frames") if getattr(cfg.video, name)]
    return "/".join(given) if given else "the defaults"


class CogVideoXVideo:
    """``FamilySpec.video_frames`` and ``frame_rate``: the run's clip buckets, the checks on them, the model's fps."""

    def model_info(self, model: ModelOptions) -> ModelInfo:
        """:func:`~.info.model_info` of the run's model (``cfg.model``), read once (:func:`cached_model_info`)."""
        return cached_model_info(model)

    def model_fps(self, model: ModelOptions) -> float:
        """Frames per second the checkpoint generates at (1.0: 8, 1.5: 16): what validation videos are written at."""
        return self.model_info(model).fps

    def video_buckets(self, cfg: TrainConfig) -> list[tuple[int, int, int]]:
        """``--frame_buckets`` (only those), else automatic aspect buckets around the flags' or the trained size,
        that size first (:func:`~dit_lora.data.frames.automatic_buckets`): sin-cos positions (2B) are recomputed and
        RoPE (5B, 1.5) computed per size, so any multiple of the size multiple runs; a learned position table
        (5B I2V) runs only at its trained size, so such a model keeps the one bucket."""
        info = self.model_info(cfg.model)
        rule = FrameRule(temporal_compression=info.temporal, patch_size_t=info.patch_size_t, pad_latent_frames=True)
        if cfg.video.frame_buckets:
            return resolution_buckets(cfg.video.frame_buckets, spatial_multiple=info.size_multiple, **rule)
        trained_frames, trained_height, trained_width, _ = info.trained_size()
        frames = cfg.video.max_num_frames or trained_frames
        check_num_frames(
            frames, flag="--max_num_frames" if cfg.video.max_num_frames else "the model's trained frame count", **rule
        )
        height = cfg.video.height or trained_height
        width = cfg.video.width or trained_width
        check_size_multiple(
            "--height" if cfg.video.height else "the model's trained height", height, info.size_multiple, info
        )
        check_size_multiple(
            "--width" if cfg.video.width else "the model's trained width", width, info.size_multiple, info
        )
        if info.learned_positions:
            return [(frames, height, width)]
        buckets = automatic_buckets((frames, height, width), info.size_multiple)
        most = rope_limit(info)
        if most is None:
            return buckets
        # 1.5's RoPE slices a table of the sample size: an automatic bucket never goes beyond it on either side.
        return buckets[:1] + [b for b in buckets[1:] if b[1] <= most[0] and b[2] <= most[1]]

    def check_trained_size(self, cfg: TrainConfig) -> None:
        """Refuse buckets far from the checkpoint's trained size (unless ``--allow_untrained_resolution``).

        "Far" counts latent tokens per clip, what both quality and cost follow: more than
        :data:`~.info.MAX_TOKEN_RATIO` or less than :data:`~.info.MIN_TOKEN_RATIO` times the trained size's. Reads
        configs only.
        """
        if cfg.family_options.allow_untrained_resolution:
            return
        info = self.model_info(cfg.model)
        frames, height, width, why = info.trained_size()
        trained = info.latent_tokens(frames, height, width)
        for bucket in self.video_buckets(cfg):
            tokens = info.latent_tokens(*bucket)
            ratio = tokens / trained
            if MIN_TOKEN_RATIO <= ratio <= MAX_TOKEN_RATIO:
                continue
            f, h, w = bucket
            raise UserError(
                f"{size_flags(cfg)} asks for {f}x{h}x{w} (frames x height x width): {tokens:,} latent tokens "
                f"per clip, {ratio:.3g}x the {trained:,} of {frames}x{height}x{width}, the size "
                f"`{cfg.model.pretrained_model_name_or_path}` was trained at ({why}). So far from its training size the "
                "model generates poorly and a LoRA trained there learns to repair that size, not your data"
                + (f"; each step also costs over {ratio:.0f}x the memory and time. " if ratio > 1 else ". ")
                + f"Use a size within {MIN_TOKEN_RATIO:g}x to {MAX_TOKEN_RATIO:g}x that token count, e.g. "
                f"--height {height} --width {width} --max_num_frames {frames}, or add --allow_untrained_resolution "
                "to train at this size anyway (the flag only lifts this check)."
            )

    def check_rope_size(self, cfg: TrainConfig, buckets, info: ModelInfo) -> None:
        """Refuse a bucket beyond CogVideoX 1.5's RoPE table (:func:`rope_limit`): diffusers fails on it mid-step."""
        most = rope_limit(info)
        if most is None:
            return
        beyond = [b for b in buckets if b[1] > most[0] or b[2] > most[1]]
        if beyond:
            f, h, w = beyond[0]
            raise UserError(
                f"{size_flags(cfg)} asks for {f}x{h}x{w} (frames x height x width), but "
                f"`{cfg.model.pretrained_model_name_or_path}`'s rotary position table (CogVideoX 1.5: sample_height x "
                f"sample_width of transformer/config.json) covers at most {most[0]}x{most[1]} px (height x width); "
                f"diffusers cannot place a larger frame. Use a height of at most {most[0]} and a width of at most "
                f"{most[1]}."
            )
