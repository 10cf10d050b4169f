"""CogVideoX text-to-video (``cogvideox``, ``CogVideoXPipeline``) and image-to-video (``cogvideox_i2v``,
``CogVideoXImageToVideoPipeline``): one implementation, two registered families.

Versions. Read from the checkpoint's small configs (never guessed from its name): CogVideoX 1.0 2B
(fixed sin-cos positions, scheduler ``snr_shift_scale`` 3.0), 1.0 5B (RoPE; the 5B I2V adds a learned
position table that only runs at its trained size) and 1.5 (RoPE, ``patch_size_t`` 2, I2V with an
``ofs`` embedding). T2V vs I2V: the transformer takes ``2 x`` the VAE's latent channels for I2V
(noisy video latents and the first-frame image latents, concatenated on the channel axis).

Clips and latents. Pixel clips ``(B, F, 3, H, W)`` with ``F = 4k + 1`` go through the VAE as
``(B, 3, F, H, W)``; the cache holds the posterior mean (``latent_dist.mode()``, so the cache is
deterministic; the reference trainers sample) times ``scaling_factor``, as ``(B, F', C, h, w)`` with
``F' = (F - 1) / 4 + 1``. I2V also caches the first frame encoded alone (``(B, 1, C, h, w)``), scaled
like ``CogVideoXImageToVideoPipeline.prepare_latents`` does: times ``scaling_factor``, or divided by
it when the VAE has ``invert_scale_latents`` (CogVideoX 1.5).

Video size. Default: the size the checkpoint was trained at (:meth:`ModelInfo.trained_size`): 480x720, 49
frames for 1.0; 768x1360, 81 frames for 1.5, whose config's ``sample_height``/``sample_width`` (300, i.e.
2400 px, what diffusers' pipelines default to) bound its RoPE grid. The run prints the size and why; sizes
far from the trained one (over 2x or under 1/4 of its latent tokens per clip) need
``--allow_untrained_resolution``.

Loss (the reference trainers'; math in :mod:`.loss`): ``t`` uniform over 0..999 (or
``--timestep_sampling logit_normal``), ``x_t = scheduler.add_noise(x0, eps, t)`` with the checkpoint's
``CogVideoXDDIMScheduler`` config, the transformer predicts ``v``, ``x0_hat = get_velocity(v, x_t, t)``,
loss ``= mean_b w_t mean((x0_hat - x0)^2)`` with ``w_t = 1 / (1 - alpha_bar_t)`` (``--loss_weight_cap``
clamps it). RoPE is computed by the pipeline's own ``_prepare_rotary_positional_embeddings`` for the
latent geometry (cached per size), so training and inference positions are identical.

CogVideoX 1.5 padding. ``patch_size_t`` 2 needs an even latent frame count; the pipelines generate
``patch_size_t - F' % patch_size_t`` extra latent frames and drop them from the front after denoising.
Training prepends that many copies of the first latent frame (as THUDM's trainer does) and the loss
covers every frame. I2V: the image latent sits at frame 0 of the padded sequence and the other frames
are zeros, which is exactly what ``prepare_latents`` builds for the padded frame count.

I2V conditioning. Per sample and step, ``--first_frame_noise`` adds ``sigma * eps`` with
``sigma = exp(N(-3, 0.5))`` to the cached image latents and ``--noised_image_dropout`` zeroes them with
that probability. (The reference trainers add this noise to the image *pixels* before encoding; a
latent cache cannot, so it is added to the latents.) 1.5 I2V passes ``ofs = 2.0`` like the pipeline.

Precision. Transformer, VAE and T5 load in the run's dtype (bf16 by default), as the reference
trainers run them; LoRA trains in fp32. Timesteps and noise are drawn on the device with the run's
generator (no host copy, no sync).

Saving. ``CogVideoXPipeline.save_lora_weights`` (``CogVideoXLoraLoaderMixin``, shared by the I2V
pipeline) with the LoRA config as metadata; the scale alpha / rank is folded into ``lora_B`` and the metadata
says alpha = rank (:func:`dit_lora.output.adapter.fold_lora_scale`), so loaders with or without it agree.
Validation videos are MP4 files (:mod:`dit_lora.output.video`) at 8 fps (1.0) or 16 fps (1.5).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from dit_lora.core.quiet import dtype_kwarg
from dit_lora.modeling import quantize
from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.setup.tokenizer_check import check_tokenizer_packages
from dit_lora.contract.family import Components, schedule_on_device
from dit_lora.contract.capabilities import (
    Demo, FusedKernels, MemoryPlan, ModelCard, ModelDefaults, Precision, RunNotes, RunSetup, Samples, VideoFrames,
)
from dit_lora.output.adapter import attach_adapter
from dit_lora.families.diffusion import DiffusionFamily
from dit_lora.families.cogvideox.loss import cogvideox_v_loss, sample_timesteps
from dit_lora.modelfiles.pipeline_files import (
    read_once,
    check_pipeline_folder,
    check_safetensors,
    is_local,
    load_error,
    model_stamp,
    read_component_config,
    stored_dtype,
)
from dit_lora.families.cogvideox.info import (
    T2V_PIPELINES,
    I2V_PIPELINE,
    EXAMPLE_IDS,
    FAMILY_FOR,
    KIND,
    FPS_1_0,
    FPS_1_5,
    OFS_VALUE,
    MAX_TOKEN_RATIO,
    MIN_TOKEN_RATIO,
    ModelInfo,
    model_info,
    pad_latent_frames,
    check_latent_size,
    check_size_multiple,
)

#: ``model_info`` by (model, revision, local config files' mtimes): Hub reads cost a request each
_MODEL_INFOS: dict[tuple, ModelInfo] = {}
_INFO_FILES = ("model_index.json", "transformer/config.json", "vae/config.json", "scheduler/scheduler_config.json")


def cached_model_info(cfg: TrainConfig) -> ModelInfo:
    """:func:`model_info`, read once per model path, revision and (local folders) config files' modification times,
    so a rebuilt model is read again. A module-level cache: the family spec itself holds no state."""
    return read_once(_MODEL_INFOS, cfg, _INFO_FILES, model_info)


class CogVideoXFamily(DiffusionFamily):
    """CogVideoX 1.0 (2B, 5B) and 1.5 text-to-video."""

    name = "cogvideox"
    task = "t2v"
    gradient_checkpointing_default = True
    default_lora_layers = ("to_q", "to_k", "to_v", "to_out.0")
    card_tags = ("text-to-video", "diffusers", "cogvideox", "diffusers-training")
    pipeline_class_name = "CogVideoXPipeline"
    text_encoder_label = "T5-XXL"
    capabilities = DiffusionFamily.capabilities + (
        Demo, ModelDefaults, RunNotes, Precision, RunSetup, VideoFrames, Samples, MemoryPlan, ModelCard,
        FusedKernels,
    )

    def kernel_patch_points(self) -> tuple:
        """:class:`~..capabilities.FusedKernels`: the blocks and processors the fused kernels patch (``kernels.py``)."""
        from dit_lora.families.cogvideox.kernels import patch_points

        return patch_points()

    def model_info(self, cfg: TrainConfig) -> ModelInfo:
        """:func:`model_info` of the run's model, read once (:func:`cached_model_info`)."""
        return cached_model_info(cfg)

    def _pipeline_class(self):
        import diffusers

        return getattr(diffusers, self.pipeline_class_name)

    # ---- checks before loading ------------------------------------------------------------
    def generic_defaults(self, cfg: TrainConfig) -> dict[str, tuple[Any, str]]:
        """One clip per step: a 49-frame clip is 13 latent frames of tokens (every published recipe uses batch 1)."""
        return {"train_batch_size": (1, "video: one clip per step, as THUDM's and diffusers' CogVideoX trainers")}

    def validate_config(self, cfg: TrainConfig) -> None:
        path = cfg.pretrained_model_name_or_path
        check_pipeline_folder(cfg, "CogVideoX", EXAMPLE_IDS[self.task],
                              "transformer/, vae/, text_encoder/, tokenizer/, scheduler/")
        check_safetensors(cfg, ("transformer", "vae", "text_encoder"), "CogVideoX")
        check_tokenizer_packages(path, "tokenizer", cfg.revision)
        info = self.model_info(cfg)
        known = T2V_PIPELINES + (I2V_PIPELINE,)
        if info.pipeline_class and info.pipeline_class not in known:
            hint = ("it is a CogVideoX variant this recipe does not train" if "CogVideoX" in info.pipeline_class
                    else "use the --family of that model")
            raise UserError(
                f"`{path}` is not a CogVideoX text-to-video or image-to-video pipeline: its model_index.json names "
                f"{info.pipeline_class} ({hint}). recipes/cogvideox_lora.py trains {', '.join(known)} checkpoints, "
                f"e.g. {EXAMPLE_IDS['t2v']} or {EXAMPLE_IDS['i2v']}."
            )
        tr_cfg = read_component_config(cfg, "transformer")
        transformer_class = (tr_cfg or {}).get("_class_name", "CogVideoXTransformer3DModel")
        if transformer_class != "CogVideoXTransformer3DModel":
            raise UserError(f"`{path}`: transformer/config.json is a {transformer_class}, not a "
                            "CogVideoXTransformer3DModel. Point --pretrained_model_name_or_path at a CogVideoX pipeline.")
        if tr_cfg is not None and info.task is None:
            raise UserError(
                f"`{path}`: transformer/config.json in_channels {tr_cfg.get('in_channels')} is neither the VAE's latent "
                "channels (text-to-video) nor twice them (image-to-video); recipes/cogvideox_lora.py trains neither "
                "kind of model here (e.g. CogVideoX-Fun control/inpaint models are not supported)."
            )
        if info.task and info.task != self.task:
            raise UserError(
                f"`{path}` is {'an' if info.task == 'i2v' else 'a'} {KIND[info.task]} CogVideoX checkpoint "
                f"({info.evidence}), but --family {self.name} "
                f"trains {KIND[self.task]}. Use --family {FAMILY_FOR[info.task]} (recipes/cogvideox_lora.py "
                "trains both)."
            )
        buckets = self.video_buckets(cfg)
        if cfg.max_sequence_length is not None and cfg.max_sequence_length != info.max_text_seq_length:
            raise UserError(
                f"--max_sequence_length {cfg.max_sequence_length} differs from this CogVideoX transformer's "
                f"max_text_seq_length {info.max_text_seq_length} (transformer/config.json of `{path}`): the pipelines "
                "pad every prompt to exactly that many T5 tokens, and the model was trained on that length. Remove "
                f"--max_sequence_length or set it to {info.max_text_seq_length}."
            )
        if info.learned_positions:
            size = (info.sample_height * info.vae_spatial, info.sample_width * info.vae_spatial)
            bad = [b for b in buckets if (b[1], b[2]) != size]
            if bad:
                flag = "--frame_buckets" if cfg.frame_buckets else "--height/--width"
                fix = (f"Use buckets of {size[0]}x{size[1]} (e.g. {info.sample_frames}x{size[0]}x{size[1]})"
                       if cfg.frame_buckets else f"Use --height {size[0]} --width {size[1]}")
                raise UserError(
                    f"`{path}` has a learned position embedding (use_learned_positional_embeddings, like "
                    f"THUDM/CogVideoX-5b-I2V): diffusers runs it only at its trained size {size[0]}x{size[1]} px "
                    f"(height x width), but {flag} asks for {bad[0][1]}x{bad[0][2]}. {fix}."
                )
        self.check_trained_size(cfg)  # first: its message says what the size costs, and how to force it
        self._check_rope_size(cfg, buckets, info)
        self._check_validation_image(cfg)

    def _check_rope_size(self, cfg: TrainConfig, buckets, info) -> None:
        """Refuse a bucket beyond CogVideoX 1.5's RoPE table (:meth:`rope_limit`): diffusers fails on it mid-step."""
        most = self.rope_limit(info)
        beyond = [b for b in buckets if most is not None and (b[1] > most[0] or b[2] > most[1])]
        if beyond:
            f, h, w = beyond[0]
            raise UserError(
                f"{self._size_flags(cfg)} asks for {f}x{h}x{w} (frames x height x width), but "
                f"`{cfg.pretrained_model_name_or_path}`'s rotary position table (CogVideoX 1.5: sample_height x "
                f"sample_width of transformer/config.json) covers at most {most[0]}x{most[1]} px (height x width); "
                f"diffusers cannot place a larger frame. Use a height of at most {most[0]} and a width of at most "
                f"{most[1]}."
            )

    def _check_validation_image(self, cfg: TrainConfig) -> None:
        """T2V has no conditioning image."""

    def data_handler(self, cfg: TrainConfig):
        """Clips, decoded to :meth:`video_buckets`."""
        from dit_lora.data.prepare import cache_root_for
        from dit_lora.data.video_prepare import VideoMedia

        return VideoMedia(cfg, self, cache_root_for(cfg.data))

    def model_fps(self, cfg: TrainConfig) -> float:
        """Frames per second the checkpoint generates at (1.0: 8, 1.5: 16): what validation videos are written at."""
        return self.model_info(cfg).fps

    def video_buckets(self, cfg: TrainConfig) -> list[tuple[int, int, int]]:
        """``--frame_buckets`` (only those), else automatic aspect buckets around the flags' or the trained size,
        that size first (:func:`~dit_lora.data.frames.automatic_buckets`): sin-cos positions (2B) are recomputed and
        RoPE (5B, 1.5) computed per size, so any multiple of the size multiple runs; a learned position table
        (5B I2V) runs only at its trained size, so such a model keeps the one bucket."""
        from dit_lora.data.frames import automatic_buckets, check_num_frames, resolution_buckets

        info = self.model_info(cfg)
        rule = {"temporal_compression": info.temporal, "patch_size_t": info.patch_size_t, "pad_latent_frames": True}
        if cfg.frame_buckets:
            return resolution_buckets(cfg.frame_buckets, spatial_multiple=info.size_multiple, **rule)
        trained_frames, trained_height, trained_width, _ = info.trained_size()
        frames = cfg.max_num_frames or trained_frames
        check_num_frames(frames, flag="--max_num_frames" if cfg.max_num_frames else "the model's trained frame count",
                         **rule)
        height = cfg.height or trained_height
        width = cfg.width or trained_width
        check_size_multiple("--height" if cfg.height else "the model's trained height", height, info.size_multiple, info)
        check_size_multiple("--width" if cfg.width else "the model's trained width", width, info.size_multiple, info)
        if info.learned_positions:
            return [(frames, height, width)]
        buckets = automatic_buckets((frames, height, width), info.size_multiple)
        most = self.rope_limit(info)
        if most is None:
            return buckets
        # 1.5's RoPE slices a table of the sample size: an automatic bucket never goes beyond it on either side.
        return buckets[:1] + [b for b in buckets[1:] if b[1] <= most[0] and b[2] <= most[1]]

    @staticmethod
    def rope_limit(info) -> tuple[int, int] | None:
        """The largest (height, width) in px CogVideoX 1.5's RoPE takes (its ``grid_type="slice"`` table of
        ``sample_height`` x ``sample_width`` latent px, ``_prepare_rotary_positional_embeddings``); None for 1.0,
        whose RoPE crops a grid of any size."""
        if not info.patch_size_t or not info.rope:
            return None
        return info.sample_height * info.vae_spatial, info.sample_width * info.vae_spatial

    def _size_flags(self, cfg: TrainConfig) -> str:
        """The flags that set the run's video size, for messages."""
        if cfg.frame_buckets:
            return "--frame_buckets"
        given = [f"--{name}" for name in ("height", "width", "max_num_frames") if getattr(cfg, name)]
        return "/".join(given) if given else "the defaults"

    def check_trained_size(self, cfg: TrainConfig) -> None:
        """Refuse buckets far from the checkpoint's trained size (unless ``--allow_untrained_resolution``).

        "Far" counts latent tokens per clip, what both quality and cost follow: more than
        :data:`MAX_TOKEN_RATIO` or less than :data:`MIN_TOKEN_RATIO` times the trained size's. Reads configs only.
        """
        if cfg.family_options.allow_untrained_resolution:
            return
        info = self.model_info(cfg)
        frames, height, width, why = info.trained_size()
        trained = info.latent_tokens(frames, height, width)
        for bucket in self.video_buckets(cfg):
            tokens = info.latent_tokens(*bucket)
            ratio = tokens / trained
            if MIN_TOKEN_RATIO <= ratio <= MAX_TOKEN_RATIO:
                continue
            f, h, w = bucket
            raise UserError(
                f"{self._size_flags(cfg)} asks for {f}x{h}x{w} (frames x height x width): {tokens:,} latent tokens "
                f"per clip, {ratio:.3g}x the {trained:,} of {frames}x{height}x{width}, the size "
                f"`{cfg.pretrained_model_name_or_path}` was trained at ({why}). So far from its training size the "
                "model generates poorly and a LoRA trained there learns to repair that size, not your data"
                + (f"; each step also costs over {ratio:.0f}x the memory and time. " if ratio > 1 else ". ") +
                f"Use a size within {MIN_TOKEN_RATIO:g}x to {MAX_TOKEN_RATIO:g}x that token count, e.g. "
                f"--height {height} --width {width} --max_num_frames {frames}, or add --allow_untrained_resolution "
                "to train at this size anyway (the flag only lifts this check)."
            )

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """One line: the video size(s) the run trains at, where they come from, and the trained size."""
        info = self.model_info(cfg)
        frames, height, width, why = info.trained_size()
        from dit_lora.data.frames import automatic_note

        buckets = self.video_buckets(cfg)
        # An automatic set is named by its first bucket (the default size); the note's end says what else there is.
        chosen = ", ".join(f"{f}x{h}x{w}" for f, h, w in (buckets if cfg.frame_buckets else buckets[:1]))
        also = automatic_note(buckets, automatic=not cfg.frame_buckets)
        given = [f"--{name}" for name in ("height", "width", "max_num_frames") if getattr(cfg, name)]
        if not cfg.frame_buckets and not given:
            return [f"video size: {chosen} (frames x height x width), the size the checkpoint was trained at "
                    f"({why}){also}."]
        source = self._size_flags(cfg) + ("" if cfg.frame_buckets or len(given) == 3 else ", the rest the trained size")
        trained = info.latent_tokens(frames, height, width)
        outside = [b for b in buckets if not MIN_TOKEN_RATIO <= info.latent_tokens(*b) / trained <= MAX_TOKEN_RATIO]
        forced = "; far from it, allowed by --allow_untrained_resolution" if outside else ""
        return [f"video size: {chosen} (frames x height x width) from {source}; the checkpoint was trained at "
                f"{frames}x{height}x{width} ({why}){forced}{also}."]

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """Stored fp16 weights (CogVideoX-2b); a learned position table replaced at another frame count."""
        notes = []
        name = cfg.pretrained_model_name_or_path
        dtype = stored_dtype(cfg)
        if dtype == "F16" or (dtype is None and name.lower().endswith("cogvideox-2b")):
            notes.append(
                f"`{name}` stores fp16 weights (CogVideoX-2b was trained in fp16). They load in the run's dtype "
                f"({cfg.mixed_precision}); bf16 (the default) is fine for LoRA training: it has fp32's range, so "
                "nothing overflows, at a small precision cost."
            )
        info = self.model_info(cfg)
        if info.learned_positions:
            frames = sorted({b[0] for b in self.video_buckets(cfg) if b[0] != info.sample_frames})
            if frames:
                notes.append(
                    f"`{name}` has a learned position table for {info.sample_frames} frames; at "
                    f"{', '.join(map(str, frames))} frames diffusers replaces it by fixed sin-cos positions "
                    "(CogVideoXPatchEmbed.forward), in training and at inference, so the learned table goes unused. "
                    f"Train at {info.sample_frames} frames (--max_num_frames) to keep it."
                )
        return notes

    def prepare_demo(self, cfg: TrainConfig) -> None:
        from dit_lora.data.synthetic import build_directory_atomically
        from dit_lora.data.synthetic.clips import make_moving_square_dataset
        from dit_lora.families.cogvideox.demo import TINY_COGVIDEOX_GEOMETRY, build_tiny_cogvideox_pipeline

        try:
            build_tiny_cogvideox_pipeline(cfg.pretrained_model_name_or_path, task=self.task,
                                          version=cfg.family_options.demo_cogvideox_version, seed=0)
        except ValueError as err:  # e.g. there is no 2B image-to-video model
            raise UserError(f"--demo_cogvideox_version {cfg.family_options.demo_cogvideox_version}: {err}.")
        except FileExistsError as err:
            raise UserError(f"--demo: {err}. Choose another --pretrained_model_name_or_path for the demo model.")
        _MODEL_INFOS.clear()  # the model may have just been (re)built
        fps = self.model_info(cfg).fps
        if cfg.train_data_dir:
            frames = max(b[0] for b in self.video_buckets(cfg))
            size = TINY_COGVIDEOX_GEOMETRY["height"]
            marker = {"kind": "moving_squares", "n": cfg.demo_num_images, "num_frames": frames, "size": size,
                      "fps": fps, "seed": 0}
            try:
                build_directory_atomically(
                    cfg.train_data_dir, "dit_lora_clips.json", marker,
                    lambda tmp: make_moving_square_dataset(tmp, n=cfg.demo_num_images, num_frames=frames, size=size,
                                                           fps=fps, seed=0),
                )
            except FileExistsError as err:
                raise UserError(f"--demo: {err}. Choose another --train_data_dir for the demo clips.")

    # ---- loading ---------------------------------------------------------------------------
    def expected_dtypes(self, comps: Components, cfg: TrainConfig) -> dict[str, torch.dtype]:
        """Transformer, VAE and T5 in the run's weight dtype (bf16 by default), as the reference trainers."""
        weight = cfg.weight_dtype
        return {"model": weight, "vae": weight, "text_encoder": weight}

    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        from diffusers import AutoencoderKLCogVideoX, CogVideoXDDIMScheduler, CogVideoXTransformer3DModel
        from transformers import AutoTokenizer, T5EncoderModel

        path, dtype = cfg.pretrained_model_name_or_path, cfg.weight_dtype
        common = {"revision": cfg.revision, "use_safetensors": True}  # never unpickle weights
        try:
            with quantize.diffusers_loading(cfg.model):  # --quantize_base: diffusers' own quantization config
                transformer = CogVideoXTransformer3DModel.from_pretrained(
                    path, subfolder="transformer", **dtype_kwarg("diffusers", dtype), variant=cfg.variant,
                    **quantize.diffusers_kwargs(cfg), **common
                )
            vae = AutoencoderKLCogVideoX.from_pretrained(path, subfolder="vae", **dtype_kwarg("diffusers", dtype), **common)
            text_encoder = T5EncoderModel.from_pretrained(path, subfolder="text_encoder", **dtype_kwarg("transformers", dtype),
                                                          **quantize.text_encoder_kwargs(cfg), **common)
            tokenizer = AutoTokenizer.from_pretrained(path, subfolder="tokenizer", revision=cfg.revision)
            scheduler_cfg = dict(CogVideoXDDIMScheduler.load_config(path, subfolder="scheduler", revision=cfg.revision))
        except (OSError, ValueError, ImportError) as err:
            raise load_error("CogVideoX", cfg, err) from None
        transformer.to(device)
        vae.to(device)
        text_encoder.to(device)
        comps = self._components(cfg, transformer, vae, text_encoder, scheduler_cfg, device)
        comps.encoders["tokenizer"] = tokenizer
        return comps

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        from diffusers import AutoencoderKLCogVideoX, CogVideoXTransformer3DModel
        from transformers import T5EncoderModel

        from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth

        dtype = cfg.weight_dtype
        transformer = diffusers_on_meta(CogVideoXTransformer3DModel, with_depth(read("transformer", "config.json"),
                                                                                "num_layers", depth), dtype)
        vae = diffusers_on_meta(AutoencoderKLCogVideoX, read("vae", "config.json"), dtype)
        text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype, T5EncoderModel)
        return self._components(cfg, transformer, vae, text_encoder, read("scheduler", "scheduler_config.json") or {},
                                None)

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        text = comps.encoders["text_encoder"].config.d_model
        return {"prompt_embeds": torch.empty(batch_size, comps.extras["max_sequence_length"], text,
                                             dtype=cfg.weight_dtype)}

    def pixel_batches(self, cfg: TrainConfig) -> list[tuple[str, tuple[int, ...]]]:
        from dit_lora.data.frames import most_tokens

        buckets = self.video_buckets(cfg)
        if not cfg.frame_buckets:  # automatic: every bucket has at most the default's tokens, plan the worst
            buckets = [most_tokens(buckets)]
        return [(f"{f} x {h} x {w}", (cfg.train_batch_size, f, 3, h, w)) for f, h, w in buckets]

    def _components(self, cfg: TrainConfig, transformer, vae, text_encoder, scheduler_cfg: dict, device) -> Components:
        """The loaded (or planned, ``device`` None) modules as the run's components."""
        from diffusers import CogVideoXDDIMScheduler

        transformer.requires_grad_(False)
        quantize.keep_4bit_layout(transformer, text_encoder)
        vae.requires_grad_(False).eval()
        text_encoder.requires_grad_(False).eval()
        if cfg.family_options.enable_slicing:
            vae.enable_slicing()
        if cfg.family_options.enable_tiling:
            vae.enable_tiling()
        tc = transformer.config
        scheduler = CogVideoXDDIMScheduler.from_config(scheduler_cfg)
        return Components(
            model=transformer,
            # Training needs only alphas_cumprod: the checkpoint's betas and snr_shift_scale (2B 3.0, 5B/1.5 1.0).
            scheduler=schedule_on_device(scheduler, device) if device is not None else scheduler,
            encoders={"vae": vae, "text_encoder": text_encoder},
            extras={
                "scheduler_config": scheduler_cfg,
                "max_sequence_length": int(tc.max_text_seq_length),
                "vae_scale_factor_spatial": 2 ** (len(vae.config.block_out_channels) - 1),
                "fps": FPS_1_5 if tc.patch_size_t else FPS_1_0,  # the rate validation videos are written at
                "rotary_cache": {},  # (h, w, latent frames, device) -> the pipeline's RoPE tensors
            },
        )

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        path = cfg.pretrained_model_name_or_path
        return {
            "family": self.name,
            "cogvideox_variant": self.task,  # the stored key keeps its name: existing caches stay valid
            "model": os.path.abspath(path) if is_local(path) else path,
            "model_stamp": model_stamp(cfg, ("vae", "text_encoder")),
            "revision": cfg.revision,
            "variant": cfg.variant,
            "dtype": cfg.mixed_precision,  # VAE and T5 run in it
            "max_sequence_length": self.model_info(cfg).max_text_seq_length,
            "vae_tiling": cfg.family_options.enable_tiling,  # tiles blend at the seams: slightly different latents
            "vae_slicing": cfg.family_options.enable_slicing,
            "latents": "posterior_mean_fp32" + ("+first_frame" if self.task == "i2v" else ""),
            **({"text_encoder_quantized": "nf4"} if cfg.quantize_text_encoder else {}),  # other embeddings
        }

    # ---- encoding ------------------------------------------------------------------------
    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(B, F, 3, H, W)`` in [-1, 1] -> ``{"latents": (B, F', C, h, w)}`` (fp32, posterior mean x scaling)."""
        vae = comps.encoders["vae"]
        video = pixel_values.to(vae.device, vae.dtype).permute(0, 2, 1, 3, 4)  # (B, 3, F, H, W)
        with torch.no_grad():
            latents = vae.encode(video).latent_dist.mode() * vae.config.scaling_factor
        check_latent_size(vae, video.shape[-2:], latents.shape[-2:])
        return {"latents": latents.permute(0, 2, 1, 3, 4).float()}

    def _prompt_encoder(self, comps: Components):
        # The pipeline's own encode_prompt (padding to max_length, truncation) keeps training prompts
        # identical to what the pipeline feeds the transformer at inference.
        return self._pipeline_class()(
            tokenizer=comps.encoders["tokenizer"], text_encoder=comps.encoders["text_encoder"],
            vae=None, transformer=None, scheduler=None,
        )

    def encode_prompts(self, comps: Components, captions: list[str], *, with_negative: bool = False) -> dict[str, torch.Tensor]:
        pipe = self._prompt_encoder(comps)
        length = comps.extras.get("max_sequence_length", comps.model.config.max_text_seq_length)
        with torch.no_grad():
            embeds, negative = pipe.encode_prompt(
                list(captions), negative_prompt="", do_classifier_free_guidance=with_negative,
                max_sequence_length=length,
                device=comps.encoders["text_encoder"].device,
            )
        out = {"prompt_embeds": embeds}
        if with_negative:
            out["negative_prompt_embeds"] = negative
        return out

    # ---- loss ------------------------------------------------------------------------------
    def rotary_embeddings(self, comps: Components, height: int, width: int, frames: int, device: torch.device):
        """The pipeline's ``_prepare_rotary_positional_embeddings`` for ``frames`` latent frames of ``height`` x
        ``width`` latent pixels (cached); ``None`` for transformers without RoPE (2B)."""
        if not comps.model.config.use_rotary_positional_embeddings:
            return None
        cache = comps.extras.setdefault("rotary_cache", {})
        key = (height, width, frames, str(device))
        if key not in cache:
            pipe = self._pipeline_class()(tokenizer=None, text_encoder=None, vae=None, transformer=comps.model,
                                          scheduler=None)
            scale = comps.extras.get("vae_scale_factor_spatial", 8)
            pipe.vae_scale_factor_spatial = scale  # the constructor assumes 8 without a VAE
            cache[key] = pipe._prepare_rotary_positional_embeddings(height * scale, width * scale, frames, device)
        return cache[key]

    def model_input(self, noisy: torch.Tensor, batch: dict[str, Any], generator: torch.Generator,
                    cfg: TrainConfig) -> torch.Tensor:
        """What the transformer gets besides the noisy latents (T2V: nothing)."""
        return noisy

    def compute_loss(self, comps, denoiser, batch, generator, cfg):
        scheduler, arch = comps.scheduler, comps.model.config
        latents = pad_latent_frames(batch["latents"], arch.patch_size_t)
        device = latents.device
        bsz, frames, _, height, width = latents.shape
        timesteps = sample_timesteps(  # drawn on the device with the step's generator: no host copy, no sync
            bsz, scheduler.config.num_train_timesteps, sampling=cfg.family_options.timestep_sampling,
            generator=generator,
            device=device, logit_mean=cfg.family_options.logit_mean, logit_std=cfg.family_options.logit_std,
        )
        noise = torch.randn(latents.shape, generator=generator, device=device, dtype=latents.dtype)
        noisy = scheduler.add_noise(latents, noise, timesteps)
        pred = denoiser(
            hidden_states=self.model_input(noisy, batch, generator, cfg),
            encoder_hidden_states=batch["prompt_embeds"],
            timestep=timesteps,
            ofs=noisy.new_full((1,), OFS_VALUE) if arch.ofs_embed_dim else None,  # as the I2V pipeline: shape (1,)
            image_rotary_emb=self.rotary_embeddings(comps, height, width, frames, device),
            return_dict=False,
        )[0]
        return cogvideox_v_loss(pred, noisy, latents, timesteps, scheduler,
                                weight_cap=cfg.family_options.loss_weight_cap)[0]

    # ---- sampling --------------------------------------------------------------------------
    def _inference_scheduler(self, comps: Components):
        import diffusers

        config = dict(comps.extras.get("scheduler_config") or comps.scheduler.config)
        cls = getattr(diffusers, str(config.get("_class_name", "")), None) or diffusers.CogVideoXDDIMScheduler
        return cls.from_config(config)

    def _call_kwargs(self, cfg: TrainConfig, generator: torch.Generator, num_videos: int,
                     comps: Components | None = None) -> dict[str, Any]:
        frames, height, width = self.video_buckets(cfg)[0]
        return {"num_frames": frames, "height": height, "width": width,
                "num_inference_steps": cfg.validation_inference_steps, "guidance_scale": cfg.validation_guidance_scale,
                "generator": generator, "output_type": "pil"}

    def generate(self, comps, denoiser, cond, cfg, seed):
        device = next(denoiser.parameters()).device
        with self.vae_on(comps, device) as vae:
            pipe = self._pipeline_class()(tokenizer=None, text_encoder=None, vae=vae, transformer=denoiser,
                                          scheduler=self._inference_scheduler(comps))
            pipe.set_progress_bar_config(disable=True)
            n = cfg.num_validation_images  # the pipelines make one video per prompt: repeat the embeddings
            generator = torch.Generator(device=device).manual_seed(seed)
            with torch.no_grad():
                videos = pipe(
                    prompt_embeds=cond["prompt_embeds"].to(device).repeat(n, 1, 1),
                    negative_prompt_embeds=cond["negative_prompt_embeds"].to(device).repeat(n, 1, 1),
                    **self._call_kwargs(cfg, generator, n, comps),
                ).frames
        return list(videos)

    # ---- saving and loading ----------------------------------------------------------------
    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """A validation video (list of PIL frames) as ``stem.mp4`` at the model's frame rate."""
        from dit_lora.output.video import write_video

        return write_video(sample, Path(stem).with_suffix(".mp4"), fps=self.model_info(cfg).fps)

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        self._pipeline_class().save_lora_weights(
            output_dir, transformer_lora_layers=lora_state, transformer_lora_adapter_metadata=lora_config,
            weight_name=self.adapter_weight_name, safe_serialization=True,
        )
        return Path(output_dir) / self.adapter_weight_name

    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device):
        pipe = self._pipeline_class().from_pretrained(
            cfg.pretrained_model_name_or_path, revision=cfg.revision, variant=cfg.variant, **dtype_kwarg("diffusers", cfg.weight_dtype),
            use_safetensors=True,
        )
        attach_adapter(self, pipe, adapter_dir)
        if cfg.family_options.enable_slicing:
            pipe.vae.enable_slicing()
        if cfg.family_options.enable_tiling:
            pipe.vae.enable_tiling()
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)

    def generate_with_pipeline(self, pipe, prompt, cfg, seed, num_images, comps=None):
        generator = torch.Generator(device=pipe.transformer.device).manual_seed(seed)
        with torch.no_grad():
            return list(pipe(
                prompt=[prompt] * num_images, max_sequence_length=pipe.transformer.config.max_text_seq_length,
                **self._call_kwargs(cfg, generator, num_images, comps),
            ).frames)

    def _snippet_image(self, cfg: TrainConfig) -> tuple[str, str, str]:
        """(extra import, lines before the call, argument) for the usage snippet's conditioning image."""
        return "", "", ""

    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        frames, height, width = self.video_buckets(cfg)[0]
        extra_import, before, image_arg = self._snippet_image(cfg)
        tiling = ("pipe.vae.enable_tiling()  # decode in tiles: much less memory\n"
                  if cfg.family_options.enable_tiling else "")
        return (
            "import torch\n"
            f"from diffusers import {self.pipeline_class_name}\n"
            f"from diffusers.utils import export_to_video{extra_import}\n\n"
            f"pipe = {self.pipeline_class_name}.from_pretrained({json.dumps(cfg.pretrained_model_name_or_path)}, "
            "torch_dtype=torch.bfloat16)\n"
            f"pipe.load_lora_weights({json.dumps(repo_or_dir)})\n"
            f"{tiling}"
            "pipe.to(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            f"{before}"
            f"video = pipe(\n    prompt={json.dumps(cfg.validation_prompt or 'a video')},{image_arg}\n"
            f"    num_frames={frames}, height={height}, width={width},\n"
            f"    num_inference_steps={cfg.validation_inference_steps}, guidance_scale={cfg.validation_guidance_scale},\n"
            "    generator=torch.manual_seed(0),\n"
            ").frames[0]\n"
            f"export_to_video(video, \"sample.mp4\", fps={self.model_info(cfg).fps})\n"
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        from dit_lora.data.frames import describe_buckets

        buckets = describe_buckets(self.video_buckets(cfg), automatic=not cfg.frame_buckets)
        info = self.model_info(cfg)
        return {
            "resolution": f"{buckets} (frames x height x width)",  # replaces the image row
            "model": info.describe(),
            "timestep_sampling": cfg.family_options.timestep_sampling,
            "loss_weight_cap": (cfg.family_options.loss_weight_cap if cfg.family_options.loss_weight_cap is not None
                                else "none (1/(1 - alpha_bar_t))"),
            "max_sequence_length": info.max_text_seq_length,
            "frame_sampling": cfg.frame_sampling,
            "vae": f"tiling {'on' if cfg.family_options.enable_tiling else 'off'}, "
                   f"slicing {'on' if cfg.family_options.enable_slicing else 'off'}",
        }

    def base_model_license(self, cfg: TrainConfig) -> str | None:
        name = cfg.pretrained_model_name_or_path
        org, _, repo = name.partition("/")
        if is_local(name) or org.lower() not in ("thudm", "zai-org") or "cogvideox" not in repo.lower():
            return None
        # CogVideoX-2b is Apache-2.0; the 5B and 1.5 weights use the CogVideoX license.
        return "apache-2.0" if repo.lower().startswith("cogvideox-2b") else "other"
