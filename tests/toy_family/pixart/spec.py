"""PixArt-alpha (diffusers ``PixArtTransformer2DModel`` / ``PixArtAlphaPipeline``), a family outside the package.

Loss: epsilon prediction on DDPM, as PixArt-alpha trains: t uniform in [0, 1000), x_t from
``DDPMScheduler.add_noise`` with the checkpoint's betas (linear 1e-4..0.02), MSE between the predicted and the
true noise. With a learned sigma (``out_channels == 2 * in_channels``) only the epsilon half enters the loss,
as ``PixArtAlphaPipeline`` uses only that half. Conditioning: T5 caption embeddings and their mask, encoded by
the pipeline's own ``encode_prompt`` (so training sees what inference feeds) and cached with the latents.

Precision: transformer and T5 in the run's weight dtype, the ``AutoencoderKL`` in fp32. Saving:
``PixArtAlphaPipeline`` has no LoRA loader and the transformer no PEFT mixin, so the adapter is saved in PEFT's
format and loaded back by ``dit_lora``'s PEFT loader. Per-run values live in ``Components.extras``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from dit_lora.modeling import quantize
from dit_lora.core.errors import UserError
from dit_lora.contract.family import Components, schedule_on_device
from dit_lora.contract.capabilities import (
    AdapterFitting, Demo, ImageBuckets, MemoryPlan, ModelCard, ModelDefaults, Precision, Samples,
)
from dit_lora.output.adapter import attach_adapter
from dit_lora.families.diffusion import DiffusionFamily
from dit_lora.families.diffusion import make_peft_capable
from dit_lora.output.names import PEFT_ADAPTER_FILE
from dit_lora.modelfiles.pipeline_files import (
    check_pipeline_folder,
    check_safetensors,
    is_local,
    load_error,
    model_stamp,
    read_component_config,
)

from .options import text_length

#: the additional conditions of the 1024 px PixArt (resolution, aspect ratio), off for smaller models
NO_ADDED_CONDITIONS = {"resolution": None, "aspect_ratio": None}


def latent_stride(cfg) -> int:
    """Pixels per transformer token side: the VAE's downsampling x the patch size (from configs only)."""
    vae_cfg = read_component_config(cfg, "vae") or {}
    tr_cfg = read_component_config(cfg, "transformer") or {}
    return 2 ** (len(vae_cfg.get("block_out_channels", [0] * 4)) - 1) * int(tr_cfg.get("patch_size", 2))


class PixArtFamily(DiffusionFamily):
    """Text-to-image PixArt-alpha (tiny random variants built by :mod:`.demo`)."""

    name = "pixart_toy"
    default_lora_layers = ("to_q", "to_k", "to_v", "to_out.0")
    card_tags = ("text-to-image", "diffusers", "pixart", "diffusers-training")
    pipeline_class_name = "PixArtAlphaPipeline"
    adapter_weight_name = PEFT_ADAPTER_FILE
    text_encoder_label = "T5"
    capabilities = DiffusionFamily.capabilities + (Demo, ModelDefaults, Precision, Samples, MemoryPlan,
                                                   ModelCard, AdapterFitting, ImageBuckets)

    def bucket_stride(self, cfg) -> int:
        """:class:`ImageBuckets`: the VAE's downsampling x the patch size (:func:`latent_stride`; 16 without a model)."""
        return latent_stride(cfg) if cfg.pretrained_model_name_or_path else 16

    def square_only(self, cfg) -> str | None:
        """:class:`ImageBuckets`: never; PixArtTransformer2DModel's patch embedding and unpatchify take any grid."""
        return None

    # ---- checks before loading ------------------------------------------------------------
    def generic_defaults(self, cfg) -> dict[str, tuple[Any, str]]:
        """The resolution the model was built for: the transformer's ``sample_size`` x the VAE's downsampling."""
        tr_cfg, vae_cfg = read_component_config(cfg, "transformer"), read_component_config(cfg, "vae")
        if not (tr_cfg and vae_cfg and tr_cfg.get("sample_size")):
            return {}
        factor = 2 ** (len(vae_cfg.get("block_out_channels", [0] * 4)) - 1)
        return {"resolution": (int(tr_cfg["sample_size"]) * factor,
                               f"transformer sample_size {tr_cfg['sample_size']} x the VAE's {factor}x")}

    def validate_config(self, cfg) -> None:
        """A PixArt pipeline folder with safetensors weights, an epsilon scheduler and a resolution it can patch."""
        check_pipeline_folder(cfg, "PixArt", "PixArt-alpha/PixArt-XL-2-512x512", "transformer/, vae/, text_encoder/")
        check_safetensors(cfg, ("transformer", "vae", "text_encoder"), "PixArt")
        stride = latent_stride(cfg)
        if cfg.resolution % stride:
            raise UserError(f"--resolution {cfg.resolution} is not a multiple of {stride} (the VAE's downsampling x "
                            f"the patch size). Use {max(stride, cfg.resolution // stride * stride)}.")
        sched = read_component_config(cfg, "scheduler", "scheduler_config.json") or {}
        if sched.get("prediction_type", "epsilon") != "epsilon":
            raise UserError(f"The scheduler of `{cfg.pretrained_model_name_or_path}` predicts "
                            f"{sched.get('prediction_type')!r}; this family trains epsilon prediction only.")

    def prepare_demo(self, cfg) -> None:
        """The tiny random PixArt at ``--pretrained_model_name_or_path`` and a shapes set at ``--train_data_dir``."""
        from dit_lora.data.synthetic.shapes import make_shapes_dataset

        from .demo import build_tiny_pixart_pipeline, tiny_pixart_config

        build_tiny_pixart_pipeline(cfg.pretrained_model_name_or_path)
        if cfg.train_data_dir:  # at the model's own size (--resolution is resolved from the model after this)
            size = tiny_pixart_config()["resolution"]
            make_shapes_dataset(cfg.train_data_dir, n=cfg.demo_num_images, size=size, seed=0)

    def expected_dtypes(self, comps: Components, cfg) -> dict[str, torch.dtype]:
        """Transformer and T5 in the run's weight dtype; the AutoencoderKL in fp32."""
        return {"model": cfg.weight_dtype, "text_encoder": cfg.weight_dtype, "vae": torch.float32}

    # ---- loading ---------------------------------------------------------------------------
    def load_components(self, cfg, device: torch.device) -> Components:
        """Transformer (frozen, PEFT-capable), VAE, T5 and tokenizer on ``device``; the DDPM training schedule."""
        from diffusers import AutoencoderKL, PixArtTransformer2DModel
        from transformers import AutoTokenizer, T5EncoderModel

        path, dtype = cfg.pretrained_model_name_or_path, cfg.weight_dtype
        common = {"revision": cfg.revision, "use_safetensors": True}
        try:
            with quantize.diffusers_loading(cfg.model):  # --quantize_base: diffusers' own quantization config
                transformer = PixArtTransformer2DModel.from_pretrained(
                    path, subfolder="transformer", torch_dtype=dtype, variant=cfg.variant,
                    **quantize.diffusers_kwargs(cfg), **common)
            vae = AutoencoderKL.from_pretrained(path, subfolder="vae", torch_dtype=torch.float32, **common)
            text_encoder = T5EncoderModel.from_pretrained(path, subfolder="text_encoder", torch_dtype=dtype,
                                                          **quantize.text_encoder_kwargs(cfg), **common)
            tokenizer = AutoTokenizer.from_pretrained(path, subfolder="tokenizer", revision=cfg.revision)
        except (OSError, ValueError, ImportError) as err:
            raise load_error("PixArt", cfg, err) from None
        quantize.keep_4bit_layout(transformer, text_encoder)
        scheduler_cfg = read_component_config(cfg, "scheduler", "scheduler_config.json") or {}
        return self._components(cfg, (transformer, vae, text_encoder, tokenizer), scheduler_cfg, device)

    def _components(self, cfg, modules: tuple, scheduler_cfg: dict, device) -> Components:
        """The loaded (or, ``device`` None, planned on the meta device) modules as the run's components."""
        from diffusers import DDPMScheduler

        transformer, vae, text_encoder, tokenizer = modules

        make_peft_capable(transformer)
        for module in (transformer, vae, text_encoder):
            module.requires_grad_(False)
            if device is not None:
                module.to(device)
        vae.eval()
        text_encoder.eval()
        betas = {k: scheduler_cfg[k] for k in ("num_train_timesteps", "beta_start", "beta_end", "beta_schedule",
                                               "trained_betas") if scheduler_cfg.get(k) is not None}
        scheduler = DDPMScheduler(**betas, prediction_type="epsilon")
        config = transformer.config
        return Components(
            model=transformer,
            scheduler=schedule_on_device(scheduler, device) if device is not None else scheduler,
            encoders={"vae": vae, "text_encoder": text_encoder, "tokenizer": tokenizer},
            extras={"scheduler_config": scheduler_cfg, "text_length": text_length(cfg),
                    "learned_sigma": config.out_channels == 2 * config.in_channels,
                    "in_channels": int(config.in_channels)},
        )

    # ---- memory plan (``dit-lora plan`` and the check at start) -----------------------------
    def plan_components(self, cfg, read, depth: int | None = None) -> Components:
        """What :meth:`load_components` loads, built on the meta device from the configs ``read`` returns."""
        from diffusers import AutoencoderKL, PixArtTransformer2DModel
        from transformers import T5EncoderModel

        from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth

        transformer = diffusers_on_meta(PixArtTransformer2DModel, with_depth(read("transformer", "config.json"),
                                                                             "num_layers", depth), cfg.weight_dtype)
        vae = diffusers_on_meta(AutoencoderKL, read("vae", "config.json"), torch.float32)
        text_encoder = transformers_on_meta(read("text_encoder", "config.json"), cfg.weight_dtype, T5EncoderModel)
        return self._components(cfg, (transformer, vae, text_encoder, None),
                                read("scheduler", "scheduler_config.json") or {}, None)

    def plan_conditioning(self, comps: Components, cfg, batch_size: int) -> dict[str, torch.Tensor]:
        """The cached caption embeddings and mask of ``batch_size`` samples, as empty tensors."""
        length, width = comps.extras["text_length"], comps.encoders["text_encoder"].config.d_model
        return {"prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype),
                "prompt_attention_mask": torch.ones(batch_size, length, dtype=torch.long)}

    def cache_identity(self, cfg, comps=None) -> dict[str, Any]:
        """The model, its files' stamp and the caption length: what changes the cached latents and embeddings."""
        path = cfg.pretrained_model_name_or_path
        return {"family": self.name, "model": os.path.abspath(path) if is_local(path) else path,
                "model_stamp": model_stamp(cfg, ("vae", "text_encoder")), "revision": cfg.revision,
                "variant": cfg.variant, "text_dtype": cfg.mixed_precision, "text_length": text_length(cfg),
                "latents": "posterior_mean_fp32"}

    # ---- encoding ------------------------------------------------------------------------
    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] -> the VAE posterior mean times ``scaling_factor``, fp32 (deterministic)."""
        vae = comps.encoders["vae"]
        with torch.no_grad():
            latents = vae.encode(pixel_values.to(vae.device, torch.float32)).latent_dist.mode()
        return (latents * vae.config.scaling_factor).float()

    def encode_prompts(self, comps: Components, captions: list[str], *,
                       with_negative: bool = False) -> dict[str, torch.Tensor]:
        """Captions -> T5 embeddings and mask through ``PixArtAlphaPipeline.encode_prompt`` (+ the "" negative)."""
        from diffusers import PixArtAlphaPipeline

        encoder = comps.encoders["text_encoder"]
        pipe = PixArtAlphaPipeline(tokenizer=comps.encoders["tokenizer"], text_encoder=encoder, vae=None,
                                   transformer=None, scheduler=None)
        with torch.no_grad():
            embeds, mask, neg, neg_mask = pipe.encode_prompt(
                list(captions), do_classifier_free_guidance=with_negative, negative_prompt="", device=encoder.device,
                clean_caption=False, max_sequence_length=comps.extras["text_length"])
        out = {"prompt_embeds": embeds, "prompt_attention_mask": mask}
        if with_negative:
            out.update(negative_prompt_embeds=neg, negative_prompt_attention_mask=neg_mask)
        return out

    # ---- loss ------------------------------------------------------------------------------
    def compute_loss(self, comps: Components, model: torch.nn.Module, batch: dict[str, Any],
                     generator: torch.Generator, cfg) -> torch.Tensor:
        """Epsilon-prediction DDPM loss of one micro-batch (random draws from ``generator`` only)."""
        latents = batch["latents"]
        device, bsz = latents.device, latents.shape[0]
        scheduler = comps.scheduler
        noise = torch.randn(latents.shape, generator=generator, device=device, dtype=latents.dtype)
        timesteps = torch.randint(0, scheduler.config.num_train_timesteps, (bsz,), generator=generator, device=device)
        noisy = scheduler.add_noise(latents, noise, timesteps)
        pred = model(noisy, encoder_hidden_states=batch["prompt_embeds"],
                     encoder_attention_mask=batch["prompt_attention_mask"], timestep=timesteps,
                     added_cond_kwargs=NO_ADDED_CONDITIONS, return_dict=False)[0]
        if comps.extras["learned_sigma"]:  # as PixArtAlphaPipeline: the first in_channels are epsilon
            pred = pred[:, : comps.extras["in_channels"]]
        return ((pred.float() - noise.float()) ** 2).mean()

    # ---- samples ----------------------------------------------------------------------------
    def _inference_scheduler(self, comps: Components):
        import diffusers

        config = dict(comps.extras.get("scheduler_config") or {})
        cls = getattr(diffusers, str(config.get("_class_name", "")), None) or diffusers.DPMSolverMultistepScheduler
        return cls.from_config(config)

    def generate(self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg, seed: int) -> list:
        """Validation images from the in-memory transformer and the cached prompt embeddings."""
        from diffusers import PixArtAlphaPipeline

        device = next(model.parameters()).device
        with self.vae_on(comps, device) as vae:
            pipe = PixArtAlphaPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=model,
                                       scheduler=self._inference_scheduler(comps))
            pipe.set_progress_bar_config(disable=True)
            generator = torch.Generator(device=device).manual_seed(seed)
            with torch.no_grad():
                return pipe(negative_prompt=None, num_images_per_prompt=cfg.num_validation_images,
                            height=cfg.resolution, width=cfg.resolution, use_resolution_binning=False,
                            num_inference_steps=cfg.validation_inference_steps,
                            guidance_scale=cfg.validation_guidance_scale, generator=generator, **cond).images

    def generate_with_pipeline(self, pipe, prompt: str, cfg, seed: int, num_images: int, comps=None) -> list:
        """Images from the reloaded pipeline (the final validation)."""
        device = pipe.transformer.device
        generator = torch.Generator(device=device).manual_seed(seed)
        # The pipeline hands the fp32 VAE latents in the transformer's dtype: autocast reconciles them (the
        # autocast the in-training validation runs under).
        mixed = pipe.transformer.dtype != pipe.vae.dtype
        with torch.no_grad(), torch.autocast(device.type, dtype=pipe.transformer.dtype, enabled=mixed):
            return pipe(prompt, num_images_per_prompt=num_images, height=cfg.resolution, width=cfg.resolution,
                        num_inference_steps=cfg.validation_inference_steps, use_resolution_binning=False,
                        guidance_scale=cfg.validation_guidance_scale, generator=generator, clean_caption=False,
                        max_sequence_length=text_length(cfg)).images

    # ---- the adapter and its consumer -------------------------------------------------------
    def save_adapter(self, output_dir: Path, lora_state: dict[str, torch.Tensor], lora_config: dict) -> Path:
        """PEFT format (``adapter_model.safetensors`` + ``adapter_config.json``)."""
        from dit_lora.output.adapter import save_peft_adapter

        return save_peft_adapter(Path(output_dir), lora_state, lora_config, None)

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir: Path) -> None:
        """Give the pipeline's transformer PEFT's methods, as training did."""
        make_peft_capable(pipe.transformer)

    def load_pipeline_with_adapter(self, cfg, adapter_dir: Path, device: torch.device):
        """A fresh ``PixArtAlphaPipeline`` from the base model with the saved adapter loaded by the PEFT loader."""
        from diffusers import AutoencoderKL, PixArtAlphaPipeline

        path = cfg.pretrained_model_name_or_path
        vae = AutoencoderKL.from_pretrained(path, subfolder="vae", revision=cfg.revision, torch_dtype=torch.float32,
                                            use_safetensors=True)
        pipe = PixArtAlphaPipeline.from_pretrained(path, vae=vae, revision=cfg.revision, variant=cfg.variant,
                                                   torch_dtype=cfg.weight_dtype, use_safetensors=True)
        attach_adapter(self, pipe, adapter_dir)
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)

    # ---- model card -------------------------------------------------------------------------
    def usage_snippet(self, cfg, repo_or_dir: str) -> str:
        """Python for the model card: load the pipeline, the adapter with ``dit_lora.load_adapter``, generate."""
        return (
            "import torch\nfrom diffusers import PixArtAlphaPipeline\n"
            "from dit_lora import load_adapter  # PixArtAlphaPipeline has no load_lora_weights\n\n"
            f"pipe = PixArtAlphaPipeline.from_pretrained(\"{cfg.pretrained_model_name_or_path}\")\n"
            f"load_adapter(pipe, \"{repo_or_dir}\")\n"
            f"image = pipe({(cfg.validation_prompt or 'a photo')!r}, height={cfg.resolution}, width={cfg.resolution}, "
            "use_resolution_binning=False).images[0]\n"
        )

    def card_settings(self, cfg) -> dict[str, Any]:
        """The toy family's row of the model card's settings table."""
        return {"pixart_text_length": text_length(cfg), "loss": "epsilon (DDPM)"}

    def base_model_license(self, cfg) -> str | None:
        """Unknown for a toy model."""
        return None
