"""Sana (diffusers ``SanaTransformer2DModel`` / ``SanaPipeline``): everything Sana-specific lives here.

Loss: rectified flow, x_t = (1 - sigma) x0 + sigma eps, target eps - x0, with the timestep density
and loss weighting of ``diffusers.training_utils`` and the flow shift read from the checkpoint's
scheduler config. Precision: transformer and Gemma-2 in bf16, DC-AE in fp32.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from dit_lora.core.quiet import dtype_kwarg
from dit_lora.modeling import quantize
from dit_lora.config import TrainConfig
from dit_lora.data.text_padding import cut_text_padding
from dit_lora.modeling.flow_matching import (
    draw,
    flow_tables,
    loss_weighting,
    noisy_latents,
    training_scheduler,
    velocity_target,
    weighted_mse,
)
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.single_file import load_transformer
from dit_lora.setup.tokenizer_check import check_tokenizer_packages
from dit_lora.contract.family import Components
from dit_lora.contract.capabilities import (
    Demo, FusedKernels, ImageBuckets, MemoryPlan, ModelCard, ModelDefaults, Precision, RunNotes, RunSetup, Samples,
)
from dit_lora.output.adapter import attach_adapter
from dit_lora.families.diffusion import DiffusionFamily
from dit_lora.modelfiles.pipeline_files import (
    check_pipeline_folder,
    check_safetensors,
    is_local,
    load_error,
    model_stamp,
    read_component_config,
    stored_dtype,
)


def default_complex_human_instruction() -> list[str]:
    """The instruction prefix SanaPipeline uses by default at inference."""
    from diffusers import SanaPipeline

    return list(inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default)


#: SanaPipeline.check_inputs: "`height` and `width` have to be divisible by 32"
PIPELINE_MULTIPLE = 32


def resolution_multiple(tr_cfg: dict, vae_cfg: dict) -> tuple[int, int]:
    """(what ``--resolution`` must be a multiple of, the latent stride): the latent stride (DC-AE compression x
    patch size) and SanaPipeline's 32, so that training and the validation/final samples accept the size."""
    latent = 2 ** (len(vae_cfg.get("encoder_block_out_channels", [0] * 6)) - 1) * int(tr_cfg.get("patch_size", 1))
    return math.lcm(latent, PIPELINE_MULTIPLE), latent


def check_resolution(resolution: int, tr_cfg: dict, vae_cfg: dict) -> None:
    """Refuse a ``--resolution`` the model or SanaPipeline cannot take, suggesting the nearest sizes both take."""
    multiple, latent = resolution_multiple(tr_cfg, vae_cfg)
    if resolution % multiple == 0:
        return
    lower, upper = resolution // multiple * multiple, (resolution // multiple + 1) * multiple
    use = f"{lower} or {upper}" if lower else upper
    raise UserError(
        f"--resolution {resolution} is not divisible by {multiple}: this Sana model's latent stride is {latent} "
        f"(DC-AE compression x patch size) and SanaPipeline, which draws the validation and final samples, takes "
        f"only sizes divisible by {PIPELINE_MULTIPLE} (see --resolution). Use {use}."
    )


class SanaFamily(DiffusionFamily):
    """Text-to-image Sana 600M / 1.6B (and tiny random variants for tests)."""

    name = "sana"
    default_lora_layers = ("to_q", "to_k", "to_v", "to_out.0")
    card_tags = ("text-to-image", "diffusers", "sana", "diffusers-training")
    pipeline_class_name = "SanaPipeline"
    text_encoder_label = "Gemma-2"
    capabilities = DiffusionFamily.capabilities + (
        Demo, ModelDefaults, RunNotes, Precision, RunSetup, Samples, MemoryPlan, ModelCard, FusedKernels, ImageBuckets,
    )

    def bucket_stride(self, cfg: TrainConfig) -> int:
        """:class:`~..capabilities.ImageBuckets`: the latent stride, DC-AE compression x patch size (32 x 1), from
        the model's configs (their defaults when no model is named, as in ``check-data``)."""
        named = bool(cfg.pretrained_model_name_or_path)
        tr_cfg = read_component_config(cfg, "transformer") if named else None
        vae_cfg = read_component_config(cfg, "vae") if named else None
        return resolution_multiple(tr_cfg or {}, vae_cfg or {})[1]

    def square_only(self, cfg: TrainConfig) -> str | None:
        """:class:`~..capabilities.ImageBuckets`: never; SanaTransformer2DModel patchifies and unpatchifies any
        height and width (its patch embedding has no positional table, or recomputes its sin-cos one for the grid)."""
        return None

    def kernel_patch_points(self) -> tuple:
        """:class:`~..capabilities.FusedKernels`: the blocks and processors the fused kernels patch (``kernels.py``)."""
        from dit_lora.families.sana.kernels import patch_points

        return patch_points()

    # ---- checks before loading ------------------------------------------------------------
    def generic_defaults(self, cfg: TrainConfig) -> dict[str, tuple[Any, str]]:
        """The resolution the model was built for: its transformer's ``sample_size`` x the DC-AE's compression."""
        tr_cfg, vae_cfg = read_component_config(cfg, "transformer"), read_component_config(cfg, "vae")
        if not (tr_cfg and vae_cfg and tr_cfg.get("sample_size")):
            return {}
        factor = 2 ** (len(vae_cfg.get("encoder_block_out_channels", [0] * 6)) - 1)
        size = int(tr_cfg["sample_size"]) * factor
        return {"resolution": (size, f"transformer sample_size {tr_cfg['sample_size']} x the VAE's {factor}x")}

    def validate_config(self, cfg: TrainConfig) -> None:
        check_pipeline_folder(cfg, "Sana", "Efficient-Large-Model/Sana_600M_1024px_diffusers",
                              "transformer/, vae/, text_encoder/")
        check_safetensors(cfg, ("transformer", "vae", "text_encoder"), "Sana")
        check_tokenizer_packages(cfg.pretrained_model_name_or_path, "tokenizer", cfg.revision)
        vae_cfg = read_component_config(cfg, "vae")
        if vae_cfg is not None:
            check_resolution(cfg.resolution, read_component_config(cfg, "transformer") or {}, vae_cfg)

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """Warnings about the checkpoint's stored precision (fp16-trained Sana must not run in bf16)."""
        from dit_lora.catalogue import entries, match
        from dit_lora.catalogue.defaults import config_reader

        dtype = stored_dtype(cfg)
        name = cfg.pretrained_model_name_or_path
        fp16 = dtype == "F16" or (dtype is None and "Sana" in name and "BF16" not in name.upper())
        if not fp16 or cfg.mixed_precision != "bf16":  # fp16 keeps the trained precision; fp32 loses nothing
            return []
        entry = match(self.name, config_reader(cfg), dtype)
        twin = next((e for e in entries(self.name) if entry is not None and e.stored_dtype == "bf16"
                     and e.signature == entry.signature and e.depth == entry.depth), None)
        if twin is not None:
            advice = f"Prefer its BF16 release, {twin.hub_id}"
        elif entry is None:
            advice = ("Prefer a `_BF16_diffusers` release of the same model (e.g. "
                      "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers; `dit-lora models` lists them)")
        else:
            advice = (f"{entry.hub_id} has no BF16 release (the Sana 600M and 512 px releases are fp16/fp32 only): "
                      "--mixed_precision fp16 trains it in the precision it was trained in, at fp16's overflow risk "
                      "(the finite-step guard skips such steps), or accept bf16's small precision cost")
        return [
            f"`{name}` stores fp16 weights: the Sana 1.0 fp16 checkpoints were trained in fp16 and the "
            f"maintainers warn bf16 degrades them. {advice}."
        ]

    def prepare_demo(self, cfg: TrainConfig) -> None:
        from dit_lora.data.synthetic import is_user_folder
        from dit_lora.data.synthetic.shapes import SHAPES_MARKER, check_demo_resolution, make_shapes_dataset
        from dit_lora.families.sana.demo import build_tiny_sana_pipeline, get_tiny_sana_config

        # Sizes first, from the demo model's config: nothing is built (or drawn at 100000 px) for a size
        # the run would refuse anyway.
        tiny = get_tiny_sana_config(cfg.demo_size)
        check_resolution(cfg.resolution, tiny["transformer"], tiny["vae"])
        check_demo_resolution(cfg.resolution)
        build_tiny_sana_pipeline(cfg.pretrained_model_name_or_path, size=cfg.demo_size, seed=0)
        if cfg.train_data_dir and is_user_folder(cfg.train_data_dir, SHAPES_MARKER):
            print(f"--demo: --train_data_dir {cfg.train_data_dir} already holds data; training on it as it is",
                  flush=True)
        elif cfg.train_data_dir:
            make_shapes_dataset(cfg.train_data_dir, n=cfg.demo_num_images, size=cfg.resolution, seed=0)

    # ---- loading ---------------------------------------------------------------------------
    def expected_dtypes(self, comps: Components, cfg: TrainConfig) -> dict[str, torch.dtype]:
        """Transformer and Gemma-2 in the run's weight dtype; the DC-AE stays fp32."""
        weight = cfg.weight_dtype
        return {"model": weight, "text_encoder": weight, "vae": torch.float32}

    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        from diffusers import AutoencoderDC, SanaTransformer2DModel
        from transformers import AutoModel, AutoTokenizer

        path, dtype = cfg.pretrained_model_name_or_path, cfg.weight_dtype
        # Weights from safetensors only: a pickle file can run code when it is read.
        common = {"revision": cfg.revision, "use_safetensors": True}
        try:
            # torch_dtype loads straight into bf16: no fp32 copy of the 1.6B transformer on the way.
            with quantize.diffusers_loading(cfg.model):  # --quantize_base: diffusers' own quantization config
                transformer = load_transformer(  # from the folder, or --transformer_file
                    SanaTransformer2DModel, cfg.model, "transformer", **dtype_kwarg("diffusers", dtype),
                    variant=cfg.variant,
                    **quantize.diffusers_kwargs(cfg), **common
                )
            vae = AutoencoderDC.from_pretrained(path, subfolder="vae", **dtype_kwarg("diffusers", torch.float32), **common)
            text_encoder = AutoModel.from_pretrained(path, subfolder="text_encoder", **dtype_kwarg("transformers", dtype),
                                                     **quantize.text_encoder_kwargs(cfg), **common)
            tokenizer = AutoTokenizer.from_pretrained(path, subfolder="tokenizer", revision=cfg.revision)
        except (OSError, ValueError, ImportError) as err:
            raise load_error("Sana", cfg, err) from None
        scheduler_cfg = read_component_config(cfg, "scheduler", "scheduler_config.json") or {}
        quantize.keep_4bit_layout(transformer, text_encoder)
        transformer.requires_grad_(False)
        vae.requires_grad_(False).eval()
        text_encoder.requires_grad_(False).eval()
        transformer.to(device)
        vae.to(device)
        text_encoder.to(device)
        scheduler = training_scheduler(scheduler_cfg)
        return Components(
            model=transformer,
            scheduler=scheduler,
            encoders={"vae": vae, "text_encoder": text_encoder, "tokenizer": tokenizer},
            extras={"scheduler_config": scheduler_cfg, "flow_tables": flow_tables(scheduler, device)},
        )

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        from diffusers import AutoencoderDC, SanaTransformer2DModel

        from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth

        dtype = cfg.weight_dtype
        transformer = diffusers_on_meta(SanaTransformer2DModel, with_depth(read("transformer", "config.json"),
                                                                           "num_layers", depth), dtype)
        vae = diffusers_on_meta(AutoencoderDC, read("vae", "config.json"), torch.float32)
        text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype)
        scheduler = training_scheduler(read("scheduler", "scheduler_config.json") or {})
        return Components(model=transformer, scheduler=scheduler, encoders={"vae": vae, "text_encoder": text_encoder},
                          extras={"max_sequence_length": self._max_sequence_length(cfg)})

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        length, width = comps.extras["max_sequence_length"], comps.encoders["text_encoder"].config.hidden_size
        return {"prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype),
                "prompt_attention_mask": torch.ones(batch_size, length, dtype=torch.long)}

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        return {
            "family": self.name,
            "model": os.path.abspath(cfg.pretrained_model_name_or_path)
            if is_local(cfg.pretrained_model_name_or_path)
            else cfg.pretrained_model_name_or_path,
            "model_index_mtime": model_stamp(cfg, ("vae", "text_encoder")),
            "revision": cfg.revision,
            "variant": cfg.variant,
            "text_dtype": cfg.mixed_precision,
            "complex_human_instruction": cfg.family_options.complex_human_instruction,
            "max_sequence_length": self._max_sequence_length(cfg),
            **({"text_encoder_quantized": "nf4"} if cfg.quantize_text_encoder else {}),  # other embeddings
        }

    # ---- encoding ------------------------------------------------------------------------
    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        vae = comps.encoders["vae"]
        with torch.no_grad():
            latents = vae.encode(pixel_values.to(vae.device, torch.float32)).latent
        return (latents * vae.config.scaling_factor).float()

    def _prompt_encoder(self, comps: Components):
        from diffusers import SanaPipeline

        # The pipeline's own encode_prompt (prefix, truncation, token selection) keeps training
        # prompts identical to what SanaPipeline feeds the model at inference.
        return SanaPipeline(
            tokenizer=comps.encoders["tokenizer"], text_encoder=comps.encoders["text_encoder"],
            vae=None, transformer=None, scheduler=None,
        )

    def encode_prompts(self, comps: Components, captions: list[str], *, with_negative: bool = False) -> dict[str, torch.Tensor]:
        chi = comps.extras.get("complex_human_instruction")
        pipe = self._prompt_encoder(comps)
        with torch.no_grad():
            embeds, mask, neg, neg_mask = pipe.encode_prompt(
                list(captions), do_classifier_free_guidance=with_negative, negative_prompt="",
                device=comps.encoders["text_encoder"].device,
                max_sequence_length=comps.extras.get("max_sequence_length", 300),
                complex_human_instruction=chi,
            )
        out = {"prompt_embeds": embeds, "prompt_attention_mask": mask}
        if with_negative:
            out.update(negative_prompt_embeds=neg, negative_prompt_attention_mask=neg_mask)
        return out

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """Record per-run encoding settings on the components."""
        comps.extras["complex_human_instruction"] = (default_complex_human_instruction()
                                                     if cfg.family_options.complex_human_instruction else None)
        comps.extras["max_sequence_length"] = self._max_sequence_length(cfg)

    @staticmethod
    def _max_sequence_length(cfg: TrainConfig) -> int:
        return cfg.max_sequence_length or 300  # SanaPipeline's default

    def build_data(self, cfg: TrainConfig, comps: Components, accelerator):
        """The family's data, then (cached, --trim_text_padding) the caption length every batch is cut to."""
        from dit_lora.data.text_padding import used_text_length

        data = super().build_data(cfg, comps, accelerator)
        # The empty caption's entry (--caption_dropout_probability) is a caption the batches may hold too.
        files = [*data.dataset.files, *filter(None, [getattr(data.dataset, "empty_prompt", None)])] if data.cached else []
        length = used_text_length(files) if data.cached and cfg.family_options.trim_text_padding else None
        comps.extras["text_tokens"] = length
        if length is not None and length < self._max_sequence_length(cfg) and accelerator.is_main_process:
            print(f"caption tokens: the longest cached caption uses {length} of {self._max_sequence_length(cfg)} "
                  "padded tokens; every batch is cut to them (the rest is masked in every sample: "
                  "--trim_text_padding false keeps it)")
        return data

    # ---- loss ------------------------------------------------------------------------------
    def compute_loss(self, comps, denoiser, batch, generator, cfg):
        latents = batch["latents"]
        if "flow_tables" not in comps.extras:  # components built by hand (tests): once, not per step
            comps.extras["flow_tables"] = flow_tables(comps.scheduler, latents.device)
        drawn = draw(latents, comps.extras["flow_tables"], cfg.family_options.weighting_scheme,
                     logit_mean=cfg.family_options.logit_mean, logit_std=cfg.family_options.logit_std,
                     mode_scale=cfg.family_options.mode_scale, generator=generator)
        noisy = noisy_latents(latents, drawn.noise, drawn.sigmas)
        embeds, mask = cut_text_padding(batch["prompt_embeds"], batch["prompt_attention_mask"],
                                        comps.extras.get("text_tokens"))
        pred = denoiser(
            hidden_states=noisy,
            encoder_hidden_states=embeds,
            encoder_attention_mask=mask,
            timestep=drawn.timesteps,
            return_dict=False,
        )[0]
        target = velocity_target(latents, drawn.noise)
        return weighted_mse(pred, target, loss_weighting(cfg.family_options.weighting_scheme, drawn.sigmas))

    # ---- sampling --------------------------------------------------------------------------
    def _inference_scheduler(self, comps: Components):
        from diffusers import DPMSolverMultistepScheduler, FlowMatchEulerDiscreteScheduler

        config = dict(comps.extras.get("scheduler_config") or {})
        if config.get("_class_name") == "DPMSolverMultistepScheduler":
            return DPMSolverMultistepScheduler.from_config(config)
        return FlowMatchEulerDiscreteScheduler.from_config(config) if config else comps.scheduler

    def generate(self, comps, denoiser, cond, cfg, seed):
        from diffusers import SanaPipeline

        device = next(denoiser.parameters()).device
        with self.vae_on(comps, device) as vae:
            pipe = SanaPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=denoiser,
                                scheduler=self._inference_scheduler(comps))
            pipe.set_progress_bar_config(disable=True)
            generator = torch.Generator(device=device).manual_seed(seed)
            with torch.no_grad():
                return pipe(
                    prompt_embeds=cond["prompt_embeds"], prompt_attention_mask=cond["prompt_attention_mask"],
                    negative_prompt_embeds=cond["negative_prompt_embeds"],
                    negative_prompt_attention_mask=cond["negative_prompt_attention_mask"], negative_prompt=None,
                    num_images_per_prompt=cfg.num_validation_images, height=cfg.resolution, width=cfg.resolution,
                    num_inference_steps=cfg.validation_inference_steps, guidance_scale=cfg.validation_guidance_scale,
                    generator=generator, output_type="pil", use_resolution_binning=False,
                ).images

    # ---- saving and loading ----------------------------------------------------------------
    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        from diffusers import SanaPipeline

        SanaPipeline.save_lora_weights(
            output_dir, transformer_lora_layers=lora_state, transformer_lora_adapter_metadata=lora_config,
            weight_name=self.adapter_weight_name, safe_serialization=True,
        )
        return Path(output_dir) / self.adapter_weight_name

    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device):
        from diffusers import AutoencoderDC, SanaPipeline

        path = cfg.pretrained_model_name_or_path
        # Load the DC-AE in fp32 directly: a bf16 load followed by .to(fp32) would already have lost precision.
        vae = AutoencoderDC.from_pretrained(path, subfolder="vae", revision=cfg.revision, **dtype_kwarg("diffusers", torch.float32),
                                            use_safetensors=True)
        pipe = SanaPipeline.from_pretrained(
            path, vae=vae, revision=cfg.revision, variant=cfg.variant, **dtype_kwarg("diffusers", cfg.weight_dtype),
            use_safetensors=True,
        )
        attach_adapter(self, pipe, adapter_dir)
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)

    def generate_with_pipeline(self, pipe, prompt, cfg, seed, num_images, comps=None):
        device = pipe.transformer.device
        generator = torch.Generator(device=device).manual_seed(seed)
        kwargs = {} if cfg.family_options.complex_human_instruction else {"complex_human_instruction": None}
        with torch.no_grad():
            return pipe(
                prompt, num_images_per_prompt=num_images, height=cfg.resolution, width=cfg.resolution,
                num_inference_steps=cfg.validation_inference_steps, guidance_scale=cfg.validation_guidance_scale,
                generator=generator, use_resolution_binning=False, **kwargs,
            ).images

    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        chi = ("" if cfg.family_options.complex_human_instruction
               else ",\n    complex_human_instruction=None,  # trained without the prefix")
        return (
            "import torch\n"
            "from diffusers import AutoencoderDC, SanaPipeline\n\n"
            f"base = \"{cfg.pretrained_model_name_or_path}\"\n"
            "vae = AutoencoderDC.from_pretrained(base, subfolder=\"vae\", torch_dtype=torch.float32)  # DC-AE stays fp32\n"
            "pipe = SanaPipeline.from_pretrained(base, vae=vae, torch_dtype=torch.bfloat16)\n"
            f"pipe.load_lora_weights(\"{repo_or_dir}\")\n"
            "pipe.to(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            f"image = pipe(\n    {json.dumps(cfg.validation_prompt or 'a photo')},\n"
            f"    height={cfg.resolution}, width={cfg.resolution},\n"
            f"    num_inference_steps={cfg.validation_inference_steps}, guidance_scale={cfg.validation_guidance_scale}{chi},\n"
            ").images[0]\n"
            "image.save(\"sample.png\")\n"
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        return {"weighting_scheme": cfg.family_options.weighting_scheme,
                "complex_human_instruction": cfg.family_options.complex_human_instruction,
                "max_sequence_length": self._max_sequence_length(cfg)}

    def base_model_license(self, cfg: TrainConfig) -> str | None:
        return "other" if "Efficient-Large-Model" in cfg.pretrained_model_name_or_path else None
