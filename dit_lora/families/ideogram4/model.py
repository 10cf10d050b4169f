"""Ideogram 4's model component and what is read from its small config files before anything loads: the config
checks, the loading (the kit's, plus the unconditional transformer its validation samples need), the precision, its
buckets and ``--demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.families.diffusion import packed
from dit_lora.families.diffusion.components import Fp32VaePrecision, ShapesDemo
from dit_lora.families.diffusion.loader import KitModel, LoadedParts, PipelineParts, TextEncoder, model_class
from dit_lora.families.ideogram4 import demo as tiny_ideogram4  # looked up at call time: tests stand in the build
from dit_lora.families.ideogram4.state import Ideogram4Run
from dit_lora.modelfiles.pipeline_files import check_safetensors, load_error
from dit_lora.modeling import quantize

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def check_resolution(resolution: int) -> None:
    """The kit's refusal of a ``--resolution`` Ideogram4Pipeline cannot take (sizes divisible by 16)."""
    packed.check_resolution(resolution, "Ideogram 4", "Ideogram4Pipeline")


class Ideogram4Precision(Fp32VaePrecision):
    """The transformer and Qwen3-VL in the run's weight dtype, the VAE in fp32; the modules diffusers' script keeps
    out of fp8 (the transformer's ``_skip_layerwise_casting_patterns`` and the output layer) and the input projection
    stay out of ``--quantize_base``."""

    def quantize_skip_modules(self, cfg: TrainConfig) -> list[str]:
        """Everything but the blocks and the caption projection."""
        return ["input_proj", "t_embedding", "adaln_proj", "embed_image_indicator", "final_layer"]


def load_unconditional(cfg: TrainConfig, parts: PipelineParts) -> Any:
    """``Ideogram4Pipeline``'s ``unconditional_transformer`` for the run's validation samples (None without
    ``--validation_prompt``: training never runs it): in the run's weight dtype and ``--quantize_base`` as the trained
    one, frozen, in host memory (the samples bring it to the device while they are drawn)."""
    if not cfg.validation.validation_prompt:
        return None
    cls = model_class("diffusers", parts.transformer)
    try:
        with quantize.diffusers_loading(cfg.model):
            module = cls.from_pretrained(
                cfg.model.pretrained_model_name_or_path,
                subfolder="unconditional_transformer",
                revision=cfg.model.revision,
                variant=cfg.model.variant,
                use_safetensors=True,  # never a pickle
                **dtype_kwarg("diffusers", cfg.weight_dtype),
                **quantize.diffusers_kwargs(cfg),
            )
    except (OSError, ValueError, ImportError) as err:
        raise load_error(parts.kind, cfg.model, err) from None
    quantize.after_loading(cfg.model, module, parts.precision.quantize_skip_modules(cfg))
    return module.requires_grad_(False).eval()


class Ideogram4Defaults:
    """``FamilySpec.defaults``: the logit-normal density's spread Ideogram4Pipeline samples with."""

    def generic_defaults(self, cfg: TrainConfig) -> dict[str, tuple[Any, str]]:
        """``--logit_std`` 1.5."""
        return {"logit_std": (1.5, "Ideogram4Pipeline's std, diffusers' train_dreambooth_lora_ideogram4.py default")}


class Ideogram4Model(KitModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and Qwen3-VL
    in the run's weight dtype, the VAE in fp32, and for validation samples the unconditional transformer."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers Ideogram4Pipeline folder of safetensors (its unconditional transformer's too) whose tokenizer
        loads, at a size the pipeline takes."""
        self.check_folder(cfg)
        check_safetensors(cfg.model, ("unconditional_transformer",), PARTS.kind)
        check_resolution(cfg.data.resolution)

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device | None) -> Components:
        """The components of the loaded parts; the unconditional transformer read too where samples are drawn (not
        for a plan, whose parts are on the meta device: ``device`` None)."""
        state = Ideogram4Run(unconditional=load_unconditional(cfg, PARTS) if device is not None else None)
        return state.components(loaded)


#: Ideogram 4's pipeline folder, as the kit's loader reads it: Qwen3-VL (its tapped hidden states) with its
#: tokenizer; FLUX.2's VAE in fp32 (the latents are cached once from it). The unconditional transformer is read by
#: :func:`load_unconditional`, and only for samples.
PARTS = PipelineParts(
    kind="Ideogram 4",
    example_id="ideogram-ai/ideogram-v4",
    transformer="Ideogram4Transformer2DModel",
    vae="AutoencoderKLFlux2",
    folder_listing="transformer/, unconditional_transformer/, vae/, text_encoder/, tokenizer/",
    text_encoders=(TextEncoder("Qwen3VLModel"),),
    precision=Ideogram4Precision(),
)


def build_demo(cfg: TrainConfig) -> None:
    """``FamilySpec.demo``'s model: the tiny random Ideogram4Pipeline (``demo.py``)."""
    tiny_ideogram4.build_tiny_ideogram4_pipeline(cfg.model.path, seed=0)


def _check(cfg: TrainConfig) -> None:
    check_resolution(cfg.data.resolution)


#: ``FamilySpec.demo``: the tiny Ideogram 4 and the shapes, ``--resolution`` checked first
DEMO = ShapesDemo(build_demo, check=_check)
