"""The toy PixArt family's model component and what is read from its small config files before anything loads:
the config checks, loading, its defaults, precision policy, aspect-ratio buckets and ``--demo``."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.contract.family import Components, schedule_on_device
from dit_lora.core.errors import UserError
from dit_lora.families.diffusion.components import DiffusionModel, DiffusionPrecision
from dit_lora.families.diffusion.peft_capable import make_peft_capable
from dit_lora.modelfiles.pipeline_files import (
    check_pipeline_folder,
    check_safetensors,
    load_error,
    read_component_config,
)
from dit_lora.modeling import quantize

from .options import text_length
from .state import PixArtRun


def latent_stride(cfg) -> int:
    """Pixels per transformer token side: the VAE's downsampling x the patch size (from configs only)."""
    vae_cfg = read_component_config(cfg.model, "vae") or {}
    tr_cfg = read_component_config(cfg.model, "transformer") or {}
    return 2 ** (len(vae_cfg.get("block_out_channels", [0] * 4)) - 1) * int(tr_cfg.get("patch_size", 2))


def pixart_components(cfg, modules: tuple, scheduler_cfg: dict, device) -> Components:
    """The loaded (or, ``device`` None, planned on the meta device) modules as the run's components, frozen, with
    the DDPM training schedule of the checkpoint's betas and the run's :class:`PixArtRun`."""
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
        state=PixArtRun(scheduler_config=scheduler_cfg, text_length=text_length(cfg),
                        learned_sigma=config.out_channels == 2 * config.in_channels,
                        in_channels=int(config.in_channels)),
    )


class PixArtModel(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then transformer (PEFT-capable), VAE, T5 and tokenizer loaded."""

    def validate_config(self, cfg) -> None:
        """A PixArt pipeline folder with safetensors weights, an epsilon scheduler and a resolution it can patch."""
        check_pipeline_folder(cfg.model, "PixArt", "PixArt-alpha/PixArt-XL-2-512x512", "transformer/, vae/, text_encoder/")
        check_safetensors(cfg.model, ("transformer", "vae", "text_encoder"), "PixArt")
        stride = latent_stride(cfg)
        if cfg.data.resolution % stride:
            raise UserError(f"--resolution {cfg.data.resolution} is not a multiple of {stride} (the VAE's downsampling x "
                            f"the patch size). Use {max(stride, cfg.data.resolution // stride * stride)}.")
        sched = read_component_config(cfg.model, "scheduler", "scheduler_config.json") or {}
        if sched.get("prediction_type", "epsilon") != "epsilon":
            raise UserError(f"The scheduler of `{cfg.model.pretrained_model_name_or_path}` predicts "
                            f"{sched.get('prediction_type')!r}; this family trains epsilon prediction only.")

    def load_components(self, cfg, device: torch.device) -> Components:
        """Transformer (frozen, PEFT-capable), VAE, T5 and tokenizer on ``device``; the DDPM training schedule."""
        from diffusers import AutoencoderKL, PixArtTransformer2DModel
        from transformers import AutoTokenizer, T5EncoderModel

        path, dtype = cfg.model.pretrained_model_name_or_path, cfg.weight_dtype
        common = {"revision": cfg.model.revision, "use_safetensors": True}
        try:
            with quantize.diffusers_loading(cfg.model):  # --quantize_base: diffusers' own quantization config
                transformer = PixArtTransformer2DModel.from_pretrained(
                    path, subfolder="transformer", torch_dtype=dtype, variant=cfg.model.variant,
                    **quantize.diffusers_kwargs(cfg), **common)
            vae = AutoencoderKL.from_pretrained(path, subfolder="vae", torch_dtype=torch.float32, **common)
            text_encoder = T5EncoderModel.from_pretrained(path, subfolder="text_encoder", torch_dtype=dtype,
                                                          **quantize.text_encoder_kwargs(cfg), **common)
            tokenizer = AutoTokenizer.from_pretrained(path, subfolder="tokenizer", revision=cfg.model.revision)
        except (OSError, ValueError, ImportError) as err:
            raise load_error("PixArt", cfg.model, err) from None
        quantize.after_loading(cfg.model, transformer, PixArtPrecision().quantize_skip_modules(cfg), device)
        quantize.keep_4bit_layout(transformer, text_encoder)
        scheduler_cfg = read_component_config(cfg.model, "scheduler", "scheduler_config.json") or {}
        return pixart_components(cfg, (transformer, vae, text_encoder, tokenizer), scheduler_cfg, device)


class PixArtPrecision(DiffusionPrecision):
    """``FamilySpec.precision``: transformer and T5 in the run's weight dtype; the AutoencoderKL in fp32."""

    def expected_dtypes(self, comps: Components, cfg) -> dict[str, torch.dtype]:
        """Transformer and T5 in the run's weight dtype; the AutoencoderKL in fp32."""
        return {"model": cfg.weight_dtype, "text_encoder": cfg.weight_dtype, "vae": torch.float32}


class PixArtDefaults:
    """``FamilySpec.defaults``: what an uncatalogued PixArt model's configs imply."""

    def generic_defaults(self, cfg) -> dict[str, tuple[Any, str]]:
        """The resolution the model was built for: the transformer's ``sample_size`` x the VAE's downsampling."""
        tr_cfg, vae_cfg = read_component_config(cfg.model, "transformer"), read_component_config(cfg.model, "vae")
        if not (tr_cfg and vae_cfg and tr_cfg.get("sample_size")):
            return {}
        factor = 2 ** (len(vae_cfg.get("block_out_channels", [0] * 4)) - 1)
        return {"resolution": (int(tr_cfg["sample_size"]) * factor,
                               f"transformer sample_size {tr_cfg['sample_size']} x the VAE's {factor}x")}


class PixArtBuckets:
    """``FamilySpec.image_buckets``: any aspect ratio, in the latent stride."""

    def bucket_stride(self, cfg) -> int:
        """The VAE's downsampling x the patch size (:func:`latent_stride`; 16 without a model)."""
        return latent_stride(cfg) if cfg.model.pretrained_model_name_or_path else 16

    def square_only(self, cfg) -> str | None:
        """Never; PixArtTransformer2DModel's patch embedding and unpatchify take any grid."""
        return None


class PixArtDemo:
    """``FamilySpec.demo``: the tiny random PixArt (:mod:`.demo`) and the shapes data set."""

    def prepare_demo(self, cfg) -> None:
        """The tiny random PixArt at ``--pretrained_model_name_or_path`` and a shapes set at ``--train_data_dir``."""
        from dit_lora.data.synthetic.shapes import make_shapes_dataset

        from .demo import build_tiny_pixart_pipeline, tiny_pixart_config

        build_tiny_pixart_pipeline(cfg.model.pretrained_model_name_or_path)
        if cfg.data.train_data_dir:  # at the model's own size (--resolution is resolved from the model after this)
            size = tiny_pixart_config()["resolution"]
            make_shapes_dataset(cfg.data.train_data_dir, n=cfg.model.demo_num_images, size=size, seed=0)
