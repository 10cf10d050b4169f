"""Ideogram 4's model component and what is read from its small config files before anything loads: the config
checks, the loading (the kit's, plus the unconditional transformer its validation samples need), the precision, its
buckets and ``--demo``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.core.engine import decide_engine
from dit_lora.core.errors import UserError
from dit_lora.families.ideogram4 import demo as tiny_ideogram4  # looked up at call time: tests stand in the build
from dit_lora.families.ideogram4.state import Ideogram4Run
from dit_lora.kit import packed
from dit_lora.kit.components import Fp32VaePrecision, ShapesDemo
from dit_lora.kit.loader import DiffusionModel, LoadedParts, load_frozen_transformer, published_parts
from dit_lora.modelfiles.pipeline_files import check_safetensors, read_component_config

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions, ModelOptions, TrainConfig


def check_resolution(resolution: int) -> None:
    """The kit's refusal of a ``--resolution`` Ideogram4Pipeline cannot take (sizes divisible by 16)."""
    packed.check_resolution(resolution, "Ideogram 4", "Ideogram4Pipeline")


class Ideogram4Precision(Fp32VaePrecision):
    """The transformer and Qwen3-VL in the run's weight dtype, the VAE in fp32; the modules diffusers' script keeps
    out of fp8 (the transformer's ``_skip_layerwise_casting_patterns`` and the output layer) and the input projection
    stay out of ``--quantize_base``."""

    def quantize_skip_modules(self) -> list[str]:
        """Everything but the blocks and the caption projection."""
        return ["input_proj", "t_embedding", "adaln_proj", "embed_image_indicator", "final_layer"]


def load_unconditional(cfg: TrainConfig) -> Any:
    """``Ideogram4Pipeline``'s ``unconditional_transformer`` for the run's validation samples, read on the processes
    that draw them (the main one; every one under FSDP2, whose samples run on each), as the kit reads a transformer
    it never trains (:func:`~dit_lora.kit.loader.load_frozen_transformer`: host memory); None without
    ``--validation_prompt`` (training never runs it)."""
    if not cfg.validation.validation_prompt or not draws_samples():
        return None
    return load_frozen_transformer(PARTS, cfg, "unconditional_transformer")


def draws_samples() -> bool:
    """Whether this process draws the validation samples: the main process, or every one under FSDP2."""
    from accelerate import PartialState  # set up by the run's Accelerator before anything loads

    return PartialState().is_main_process or decide_engine().name == "fsdp2"


def check_unconditional(cfg: TrainConfig) -> None:
    """With ``--validation_prompt``, the folder's ``unconditional_transformer/`` (the samples' guidance runs it) is
    there before anything loads, in one paragraph naming it."""
    local = os.path.isdir(cfg.model.path)  # a Hub id not downloaded yet: its load names what is missing
    if (
        not cfg.validation.validation_prompt
        or not local
        or read_component_config(cfg.model, "unconditional_transformer")
    ):
        return
    raise UserError(
        f"`{cfg.model.pretrained_model_name_or_path}` has no readable unconditional_transformer/config.json, and "
        "--validation_prompt draws samples with Ideogram4Pipeline's asymmetric guidance, which runs that second "
        "transformer. Pass the complete Ideogram 4 folder (transformer/, unconditional_transformer/, vae/, "
        "text_encoder/, tokenizer/), or drop --validation_prompt to train without samples."
    )


class Ideogram4Defaults:
    """``FamilySpec.defaults``: the logit-normal density's spread Ideogram4Pipeline samples with."""

    def generic_defaults(self, model: ModelOptions, family_options: FamilyOptions) -> dict[str, tuple[Any, str]]:
        """``--logit_std`` 1.5."""
        return {"logit_std": (1.5, "Ideogram4Pipeline's std, diffusers' train_dreambooth_lora_ideogram4.py default")}


class Ideogram4Model(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and Qwen3-VL
    in the run's weight dtype, the VAE in fp32, and for validation samples the unconditional transformer."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers Ideogram4Pipeline folder of safetensors (its unconditional transformer's too) whose tokenizer
        loads, at a size the pipeline takes."""
        self.check_folder(cfg)
        check_safetensors(cfg.model, ("unconditional_transformer",), PARTS.kind)
        check_unconditional(cfg)
        check_resolution(cfg.data.resolution)

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device | None) -> Components:
        """The components of the loaded parts; the unconditional transformer read too where samples are drawn (not
        for a plan, whose parts are on the meta device: ``device`` None)."""
        state = Ideogram4Run(unconditional=load_unconditional(cfg) if device is not None else None)
        return state.components(loaded)


#: Ideogram 4's pipeline folder, as the kit's loader reads it: Qwen3-VL (its tapped hidden states) with its
#: tokenizer; FLUX.2's VAE in fp32 (the latents are cached once from it). The unconditional transformer is read by
#: :func:`load_unconditional`, and only for samples.
PARTS = published_parts(
    "ideogram-ai/ideogram-v4",
    kind="Ideogram 4",
    folder_listing="transformer/, unconditional_transformer/, vae/, text_encoder/, tokenizer/",
    precision=Ideogram4Precision(),
)


#: ``FamilySpec.demo``: the tiny Ideogram 4 (``demo.py``) and the shapes, ``--resolution`` checked first
DEMO = ShapesDemo.tiny(tiny_ideogram4, "build_tiny_ideogram4_pipeline", check_resolution)
