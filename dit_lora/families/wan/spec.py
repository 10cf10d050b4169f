"""Wan 2.1 and 2.2 text-to-video (``wan``, ``WanPipeline``); image-to-video is :mod:`.i2v` (``wan_i2v``).

Checkpoints. Read from the small configs (:mod:`.info`): Wan 2.1 T2V 1.3B/14B, Wan 2.2 TI2V-5B (48-channel VAE,
``expand_timesteps``: per-token timesteps) and Wan 2.2 T2V-A14B (two experts split at ``boundary_ratio``,
:mod:`.experts`).

Latents. Clips ``(B, F, 3, H, W)`` in [-1, 1] go through ``AutoencoderKLWan`` in fp32 (as diffusers' Wan docs
load it) as ``(B, 3, F, H, W)``; the cache holds the posterior mode normalised as the pipelines normalise:
``(z - latents_mean) / latents_std`` (``WanImageToVideoPipeline.prepare_latents`` normalises the condition this
way; ``WanPipeline`` decodes with the inverse), as ``(B, C, F', h, w)`` with ``F' = (F - 1) / 4 + 1``.

Loss (rectified flow). Wan's own repositories publish no trainer; the training schedule here is
``FlowMatchEulerDiscreteScheduler`` with the checkpoint's ``flow_shift`` (its scheduler config, or
``--flow_shift``): ``sigma`` from the shifted table, ``x_t = (1 - sigma) x0 + sigma eps``, timestep ``1000
sigma``, target ``eps - x0`` (the velocity the Wan pipelines integrate with ``UniPCMultistepScheduler``'s flow
prediction), plain MSE in fp32. Timesteps: ``uniform`` over the table (DiffSynth-Studio's Wan trainer) or
``logit_normal`` (:mod:`dit_lora.modeling.flow_matching`). A two-expert run draws from the trained expert's part
of the table only. TI2V-5B: every token gets its own timestep as ``WanPipeline`` passes them with
``expand_timesteps``; in image mode (``--ti2v_image_probability``) the first latent frame is the clean latent
with timestep 0 and is left out of the loss, as the pipeline keeps it fixed.

Precision. Transformer and UMT5 in the run's dtype (bf16 by default); VAE (and 2.1 I2V's CLIP) in fp32; LoRA fp32.

Saving. ``WanPipeline.save_lora_weights`` with the LoRA config as metadata, alpha / rank folded into lora_B
(:func:`dit_lora.output.adapter.fold_lora_scale`). Beside it (:meth:`WanFamily.save_adapter_extras`): which
expert each file is for (``dit_lora_adapter_files.json``, read by :func:`dit_lora.output.adapter.load_adapter_files`:
the low-noise expert loads with ``load_into_transformer_2=True``) and the ComfyUI-format files (:mod:`.comfyui`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from dit_lora.modeling import quantize
from dit_lora.config import TrainConfig
from dit_lora.modeling.flow_matching import flow_tables, noisy_latents, sample_indices, training_scheduler, velocity_target
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.pipeline_files import is_local, model_stamp, read_once
from dit_lora.contract.family import Components
from dit_lora.contract.capabilities import (
    AdapterExtras, Demo, Exports, FusedKernels, MemoryPlan, ModelCard, ModelDefaults, Precision, RunNotes, RunSetup,
    Samples, Trainables, VideoFrames,
)
from dit_lora.families.diffusion import DiffusionFamily, make_peft_capable
from dit_lora.families.wan.experts import WanExperts, expert_for_step, expert_index_ranges
from dit_lora.families.wan.info import T2V_PIPELINE, TEXT_LEN, WanInfo, wan_info

_INFOS: dict[tuple, WanInfo] = {}
_INFO_FILES = ("model_index.json", "transformer/config.json", "vae/config.json", "scheduler/scheduler_config.json")


def cached_wan_info(cfg: TrainConfig) -> WanInfo:
    """:func:`wan_info`, read once per model path, revision and (local folders) config files' modification times."""
    return read_once(_INFOS, cfg, _INFO_FILES, wan_info)


class WanFamily(DiffusionFamily):
    """Wan 2.1 / 2.2 text-to-video (T2V 1.3B, 14B; TI2V-5B; T2V-A14B)."""

    name = "wan"
    task = "t2v"
    #: the checkpoint kinds this family trains
    kinds = ("t2v", "ti2v")
    gradient_checkpointing_default = True
    # Attention and FFN of every block: DiffSynth-Studio's Wan default ("q,k,v,o,ffn.0,ffn.2") in diffusers' names.
    default_lora_layers = ("to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2")
    card_tags = ("text-to-video", "diffusers", "wan", "diffusers-training")
    pipeline_class_name = T2V_PIPELINE
    text_encoder_label = "UMT5-XXL"
    repeated_block_classes = ("WanTransformerBlock",)
    capabilities = DiffusionFamily.capabilities + (
        Demo, ModelDefaults, RunNotes, Precision, RunSetup, VideoFrames, Samples, MemoryPlan, ModelCard,
        AdapterExtras, Exports, FusedKernels,
        Trainables,  # its enable_gradient_checkpointing switches both A14B experts (WanExperts has no switch)
    )

    def info(self, cfg: TrainConfig) -> WanInfo:
        """What the checkpoint's configs say, read once (:func:`cached_wan_info`)."""
        return cached_wan_info(cfg)

    def kernel_patch_points(self) -> tuple:
        """:class:`~..capabilities.FusedKernels`: Wan's blocks and processors (``kernels.py``)."""
        from dit_lora.families.wan.kernels import patch_points

        return tuple(patch_points())

    def _pipeline_class(self):
        import diffusers

        return getattr(diffusers, self.pipeline_class_name)

    # ---- options that depend on the checkpoint ----------------------------------------------
    def expert(self, cfg: TrainConfig) -> str | None:
        """The trained expert(s) of a two-expert checkpoint (``--wan_expert``, default ``both``); None otherwise."""
        if not self.info(cfg).two_experts:
            return None
        return cfg.family_options.wan_expert or "both"

    def image_probability(self, cfg: TrainConfig) -> float:
        """TI2V-5B: the fraction of samples trained in image mode (0 for other checkpoints)."""
        if self.info(cfg).kind != "ti2v":
            return 0.0
        p = cfg.family_options.ti2v_image_probability
        return float(p) if p is not None else (1.0 if self.task == "i2v" else 0.0)

    def generic_defaults(self, cfg: TrainConfig) -> dict[str, tuple[Any, str]]:
        """One clip per step, as every published Wan LoRA recipe (musubi-tuner, DiffSynth-Studio, SimpleTuner)."""
        return {"train_batch_size": (1, "video: one clip per step, as the published Wan LoRA trainers")}

    # ---- checks before loading ----------------------------------------------------------------
    def validate_config(self, cfg: TrainConfig) -> None:
        from dit_lora.families.wan.validate import validate_wan_config

        validate_wan_config(self, cfg)

    def data_handler(self, cfg: TrainConfig):
        """Clips (and images as one-frame clips), decoded to :meth:`video_buckets`."""
        from dit_lora.data.prepare import cache_root_for
        from dit_lora.data.video_prepare import VideoMedia

        return VideoMedia(cfg, self, cache_root_for(cfg.data))

    def model_fps(self, cfg: TrainConfig) -> float:
        """Frames per second the checkpoint generates at (:attr:`WanInfo.fps`): the rate the log names."""
        return self.info(cfg).fps

    def video_buckets(self, cfg: TrainConfig) -> list[tuple[int, int, int]]:
        """The run's (frames, height, width) buckets: ``--frame_buckets`` (only those), else automatic aspect buckets
        around the flags' or the default size, that size first (:func:`~dit_lora.data.frames.automatic_buckets`:
        Wan's RoPE is computed per input size, so any multiple of :attr:`size_multiple` runs)."""
        from dit_lora.data.frames import automatic_buckets, check_num_frames, resolution_buckets

        info = self.info(cfg)
        rule = {"temporal_compression": info.vae_temporal, "patch_size_t": None}
        if cfg.frame_buckets:
            return resolution_buckets(cfg.frame_buckets, spatial_multiple=info.size_multiple, **rule)
        frames0, height0, width0, _ = info.trained_size()
        frames = cfg.max_num_frames or frames0
        check_num_frames(frames, flag="--max_num_frames" if cfg.max_num_frames else "the default frame count",
                         **rule)
        height, width = cfg.height or height0, cfg.width or width0
        for flag, value in (("--height", height), ("--width", width)):
            if value % info.size_multiple:
                fixed = max(info.size_multiple, round(value / info.size_multiple) * info.size_multiple)
                raise UserError(f"{flag} {value} must be a multiple of {info.size_multiple} for this Wan checkpoint "
                                f"(VAE {info.vae_spatial}x downsampling times patch {info.patch[1]}); use {fixed}.")
        return automatic_buckets((frames, height, width), info.size_multiple)

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        info = self.info(cfg)
        f, h, w = self.video_buckets(cfg)[0]
        from dit_lora.data.frames import automatic_note

        also = automatic_note(self.video_buckets(cfg), automatic=not cfg.frame_buckets)
        notes = [f"model: {info.describe()}; training size {f}x{h}x{w} (frames x height x width) at {info.fps} fps"
                 + also]
        expert = self.expert(cfg)
        if expert:
            what = {"high": "the high-noise expert (transformer) only", "low": "the low-noise expert (transformer_2) "
                    "only", "both": "both experts, alternating steps (odd: high noise, even: low noise)"}[expert]
            notes.append(f"two-expert checkpoint (boundary_ratio {info.boundary_ratio:g}): training {what}; each "
                         "expert's steps draw only its own timesteps")
            if expert != "both" and cfg.validation_prompt:
                notes.append("validation videos during training run the trained expert for every denoising step "
                             "(the other expert is not loaded); the final samples use both, with the adapter")
        if info.kind == "ti2v":
            notes.append(f"TI2V-5B: {self.image_probability(cfg):.0%} of samples in image-to-video mode")
        return notes

    # ---- loading ------------------------------------------------------------------------------
    def expected_dtypes(self, comps: Components, cfg: TrainConfig) -> dict[str, torch.dtype]:
        """Transformer and UMT5 in the run's weight dtype; the VAE in fp32 (diffusers' Wan docs)."""
        return {"model": cfg.weight_dtype, "vae": torch.float32, "text_encoder": cfg.weight_dtype}

    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        from dit_lora.families.wan.loading import load_wan_components

        return load_wan_components(self, cfg, device)

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        from dit_lora.families.wan.loading import plan_wan_components

        return plan_wan_components(self, cfg, read, depth)

    def make_components(self, cfg: TrainConfig, transformers: dict[str, torch.nn.Module], vae, text_encoder,
                        scheduler_cfg: dict, device, extra_encoders: dict | None = None) -> Components:
        """The loaded (or planned: ``device`` None) modules as the run's components.

        ``transformers``: ``{"high": ...}`` for a single-expert checkpoint, or the trained expert(s) of an A14B.
        """
        info = self.info(cfg)
        for t in transformers.values():
            t.requires_grad_(False)
            quantize.keep_4bit_layout(t, text_encoder)
        vae.requires_grad_(False).eval()
        if text_encoder is not None:
            text_encoder.requires_grad_(False).eval()
        if len(transformers) == 2:
            model = make_peft_capable(WanExperts(transformers["high"], transformers["low"],
                                                 offload=cfg.family_options.offload_inactive_expert))
        else:
            model = next(iter(transformers.values()))
        shift = cfg.family_options.flow_shift or info.flow_shift
        scheduler = training_scheduler({"flow_shift": shift, "num_train_timesteps": info.num_train_timesteps})
        tables = flow_tables(scheduler, device if device is not None else "cpu")
        expert = self.expert(cfg)
        ranges = {"all": (0, info.num_train_timesteps)}
        if expert:
            ranges.update(expert_index_ranges(scheduler.timesteps, info.boundary_ratio, info.num_train_timesteps))
        vae_cfg = vae.config
        return Components(
            model=model, scheduler=scheduler,
            encoders={"vae": vae, "text_encoder": text_encoder, **(extra_encoders or {})},
            extras={
                "scheduler_config": scheduler_cfg, "flow_shift": shift, "flow_tables": tables, "index_ranges": ranges,
                "expert": expert, "trained_experts": ["high", "low"] if expert == "both" else [expert or "high"], "fps": info.fps,
                "boundary_ratio": info.boundary_ratio,
                "image_probability": self.image_probability(cfg), "expand_timesteps": info.expand_timesteps,
                "latents_mean": torch.tensor(vae_cfg.latents_mean, dtype=torch.float32).view(1, -1, 1, 1, 1),
                "latents_std": torch.tensor(vae_cfg.latents_std, dtype=torch.float32).view(1, -1, 1, 1, 1),
            },
        )

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """Each expert's own diffusers switch (one transformer, or both of :class:`WanExperts`)."""
        for module in ((model.high, model.low) if isinstance(model, WanExperts) else (model,)):
            module.enable_gradient_checkpointing()

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        path = cfg.pretrained_model_name_or_path
        return {
            "family": self.name,
            "model": os.path.abspath(path) if is_local(path) else path,
            "model_stamp": model_stamp(cfg, ("vae", "text_encoder")),
            "revision": cfg.revision, "variant": cfg.variant,
            "dtype": cfg.mixed_precision,  # UMT5 runs in it (the VAE in fp32)
            "max_sequence_length": TEXT_LEN,
            "latents": "posterior_mode_normalised_fp32" + self._cached_conditions(cfg),
            **({"text_encoder_quantized": "nf4"} if cfg.quantize_text_encoder else {}),
        }

    def _cached_conditions(self, cfg: TrainConfig) -> str:
        """What besides the latents the cache holds (image-to-video adds its conditions)."""
        return ""

    # ---- encoding -------------------------------------------------------------------------------
    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(B, F, 3, H, W)`` in [-1, 1] -> ``{"latents": (B, C, F', h, w)}`` (fp32, normalised posterior mode)."""
        vae = comps.encoders["vae"]
        video = pixel_values.to(vae.device, vae.dtype).permute(0, 2, 1, 3, 4)  # (B, 3, F, H, W)
        with torch.no_grad():
            latents = vae.encode(video).latent_dist.mode().float()
        mean = comps.extras["latents_mean"].to(latents.device)
        std = comps.extras["latents_std"].to(latents.device)
        return {"latents": (latents - mean) / std}

    def _prompt_pipeline(self, comps: Components):
        # WanPipeline.encode_prompt (prompt_clean, 512-token padding, embeddings cut to each prompt's length and
        # zero-padded back): training prompts are exactly what the pipeline feeds the transformer.
        from diffusers import WanPipeline

        return WanPipeline(tokenizer=comps.encoders["tokenizer"], text_encoder=comps.encoders["text_encoder"],
                           vae=None, scheduler=None, transformer=None)

    def encode_prompts(self, comps: Components, captions: list[str], *, with_negative: bool = False
                       ) -> dict[str, torch.Tensor]:
        pipe = self._prompt_pipeline(comps)
        with torch.no_grad():
            embeds, negative = pipe.encode_prompt(
                list(captions), negative_prompt="", do_classifier_free_guidance=with_negative,
                max_sequence_length=TEXT_LEN, device=comps.encoders["text_encoder"].device,
            )
        out = {"prompt_embeds": embeds}
        if with_negative:
            out["negative_prompt_embeds"] = negative
        return out

    # ---- loss -----------------------------------------------------------------------------------
    def step_expert(self, comps: Components, batch: dict[str, Any]) -> str | None:
        """The expert this batch trains: the run's single one, or by step number for ``both`` (host-side)."""
        expert = comps.extras.get("expert")
        return expert_for_step(batch.get("step")) if expert == "both" else expert

    def draw_timesteps(self, comps: Components, latents: torch.Tensor, expert: str | None,
                       generator: torch.Generator, cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(noise, sigmas [B], timesteps [B])``: noise first, then one table entry per sample from the expert's
        part of the schedule (all of it for single-expert checkpoints), all drawn on the device."""
        sigma_table, timestep_table = comps.extras["flow_tables"]
        first, end = comps.extras["index_ranges"][expert or "all"]
        noise = torch.randn(latents.shape, generator=generator, device=latents.device, dtype=latents.dtype)
        opts = cfg.family_options
        indices = first + sample_indices(opts.timestep_sampling, latents.shape[0], end - first,
                                         logit_mean=opts.logit_mean, logit_std=opts.logit_std,
                                         device=latents.device, generator=generator)
        return noise, sigma_table[indices].to(latents.dtype), timestep_table[indices]

    def model_inputs(self, comps: Components, batch: dict[str, Any], noisy: torch.Tensor, latents: torch.Tensor,
                     timesteps: torch.Tensor, generator: torch.Generator) -> tuple[dict[str, Any], torch.Tensor | None]:
        """The transformer's inputs besides the text, and the loss mask (None: every element counts).

        TI2V-5B: per-token timesteps; image-mode samples get the clean first latent frame and timestep 0 there,
        and that frame is left out of the loss (``WanImageToVideoPipeline`` with ``expand_timesteps``).
        """
        if not comps.extras.get("expand_timesteps"):
            return {"hidden_states": noisy, "timestep": timesteps}, None
        bsz, _, frames, height, width = latents.shape
        p = float(comps.extras.get("image_probability", 0.0))
        draw = torch.rand(bsz, generator=generator, device=latents.device)  # always drawn: same RNG stream either way
        image_mode = (draw < p).to(latents.dtype).view(-1, 1, 1, 1, 1)
        mask = torch.ones(bsz, 1, frames, height, width, device=latents.device, dtype=latents.dtype)
        mask[:, :, :1] = 1.0 - image_mode[:, :, :1]
        hidden = (1.0 - mask) * latents + mask * noisy
        p_h, p_w = comps.model.config.patch_size[1:]
        per_token = (mask[:, 0, :, ::p_h, ::p_w] * timesteps.view(-1, 1, 1, 1)).flatten(1)
        return {"hidden_states": hidden, "timestep": per_token}, mask

    def compute_loss(self, comps, denoiser, batch, generator, cfg):
        latents = batch["latents"]
        expert = self.step_expert(comps, batch)
        model = denoiser.activate(expert) if isinstance(denoiser, WanExperts) else denoiser
        noise, sigmas, timesteps = self.draw_timesteps(comps, latents, expert, generator, cfg)
        noisy = noisy_latents(latents, noise, sigmas)
        inputs, mask = self.model_inputs(comps, batch, noisy, latents, timesteps, generator)
        pred = model(encoder_hidden_states=batch["prompt_embeds"], return_dict=False,
                     **self.conditioning(comps, batch, inputs, generator))[0]
        err = (pred.float() - velocity_target(latents, noise).float()) ** 2
        if mask is None:
            return err.mean()
        weight = mask.expand_as(err)
        return (err * weight).sum() / weight.sum().clamp(min=1.0)

    def conditioning(self, comps: Components, batch: dict[str, Any], inputs: dict[str, Any],
                     generator: torch.Generator) -> dict[str, Any]:
        """The transformer's keyword inputs besides the text (image-to-video adds the image condition)."""
        return inputs

    def plan_loss(self, comps: Components, batch: dict[str, Any], generator: torch.Generator,
                  cfg: TrainConfig) -> torch.Tensor:
        return self.compute_loss(comps, comps.model, batch, generator, cfg)

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        text = comps.encoders["text_encoder"].config.d_model
        return {"prompt_embeds": torch.empty(batch_size, TEXT_LEN, text, dtype=cfg.weight_dtype)}

    def pixel_batches(self, cfg: TrainConfig) -> list[tuple[str, tuple[int, ...]]]:
        from dit_lora.data.frames import most_tokens

        buckets = self.video_buckets(cfg)
        if not cfg.frame_buckets:  # automatic: every bucket has at most the default's tokens, plan the worst
            buckets = [most_tokens(buckets)]
        return [(f"{f} x {h} x {w}", (cfg.train_batch_size, f, 3, h, w)) for f, h, w in buckets]

    # ---- what image-to-video adds (text-to-video: nothing) ------------------------------------
    def load_image_encoder(self, cfg: TrainConfig, common: dict) -> dict[str, Any]:
        """Extra encoders to load (2.1 image-to-video: CLIP); none for text-to-video."""
        return {}

    def fp32_image_encoder(self, cfg: TrainConfig, common: dict) -> dict[str, Any]:
        """Components the reloaded pipeline takes in fp32 besides the VAE (2.1 I2V: the CLIP image encoder)."""
        return {}

    def check_validation_image(self, cfg: TrainConfig) -> None:
        """Image-to-video checks ``--validation_image``; text-to-video has none."""

    def pipeline_extras(self, comps: Components) -> dict[str, Any]:
        """Pipeline constructor arguments besides the modules (TI2V: ``expand_timesteps``)."""
        return {"expand_timesteps": bool(comps.extras.get("expand_timesteps"))}

    def fit_validation_pipeline(self, pipe, comps: Components) -> None:
        """Adapt the in-memory validation pipeline to what the run still holds (image-to-video: the cached CLIP
        embedding stands in for the released image encoder); nothing for text-to-video."""

    def image_call_kwargs(self, comps: Components | None, cond: dict | None, cfg: TrainConfig, n: int) -> dict:
        """The pipeline call's image arguments (text-to-video: none)."""
        return {}

    def snippet_image(self, cfg: TrainConfig) -> tuple[str, str, str]:
        """(extra import, lines before the call, argument) for the usage snippet's conditioning image."""
        return "", "", ""

    # ---- samples, saving, loading, card: see .outputs --------------------------------------------
    def prepare_demo(self, cfg: TrainConfig) -> None:
        from dit_lora.families.wan.outputs import prepare_wan_demo

        prepare_wan_demo(self, cfg)
        _INFOS.clear()

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Nothing for text-to-video (image-to-video keeps its validation image)."""

    def generate(self, comps, denoiser, cond, cfg, seed):
        from dit_lora.families.wan.outputs import generate_validation

        return generate_validation(self, comps, denoiser, cond, cfg, seed)

    def generate_with_pipeline(self, pipe, prompt, cfg, seed, num_images, comps=None):
        from dit_lora.families.wan.outputs import generate_from_pipeline

        return generate_from_pipeline(self, pipe, prompt, cfg, seed, num_images, comps)

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """A validation video (list of PIL frames) as ``stem.mp4`` at the checkpoint's frame rate."""
        from dit_lora.output.video import write_video

        return write_video(sample, Path(stem).with_suffix(".mp4"), fps=self.info(cfg).fps)

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """``WanPipeline.save_lora_weights``; a two-expert model's ``high.``/``low.`` keys go to one file each."""
        from dit_lora.families.wan.outputs import save_wan_adapter

        return save_wan_adapter(self, output_dir, lora_state, lora_config)

    def save_adapter_extras(self, output_dir: Path, comps: Components, cfg: TrainConfig) -> None:
        """Which expert each adapter file is for, and the ComfyUI-format files beside them."""
        from dit_lora.families.wan.outputs import save_wan_extras

        save_wan_extras(self, output_dir, comps, cfg)

    def export_formats(self) -> dict[str, str]:
        return {"comfyui": "ComfyUI's Wan key names (diffusion_model.blocks.N.self_attn.q, ...) with the strength folded "
                           "into lora_B and no .alpha keys, so strength 1.0 is the trained one; the names follow "
                           "ComfyUI's source and the file reproduces the trained output through diffusers' converter in "
                           "dit-lora's tests (ComfyUI itself not run)"}

    def export_adapter(self, output_dir: Path, fmt: str) -> list[Path]:
        from dit_lora.families.wan.outputs import export_wan

        return export_wan(output_dir, fmt)

    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device):
        from dit_lora.families.wan.outputs import load_wan_pipeline

        return load_wan_pipeline(self, cfg, adapter_dir, device)

    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        from dit_lora.families.wan.outputs import usage_snippet

        return usage_snippet(self, cfg, repo_or_dir)

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        info = self.info(cfg)
        from dit_lora.data.frames import describe_buckets

        buckets = describe_buckets(self.video_buckets(cfg), automatic=not cfg.frame_buckets)
        settings = {"resolution": f"{buckets} (frames x height x width)", "model": info.describe(),
                    "timestep_sampling": cfg.family_options.timestep_sampling,
                    "flow_shift": cfg.family_options.flow_shift or info.flow_shift, "frame_sampling": cfg.frame_sampling}
        if self.expert(cfg):
            settings["experts"] = {"high": "high-noise expert (`transformer`)", "low": "low-noise expert "
                                   "(`transformer_2`)", "both": "both experts, one adapter each"}[self.expert(cfg)]
        if info.kind == "ti2v":
            settings["ti2v_image_probability"] = self.image_probability(cfg)
        return settings

    def base_model_license(self, cfg: TrainConfig) -> str | None:
        name = cfg.pretrained_model_name_or_path
        # Every Wan-AI release is Apache-2.0 (the Wan2.1 and Wan2.2 model cards).
        return "apache-2.0" if not is_local(name) and name.lower().startswith("wan-ai/") else None
