"""FLUX.2's model component and what is read from its small config files before anything loads: which pipeline the
folder is (dev or klein), the config checks, its precision policy, its buckets and ``--demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.flux2 import demo as tiny_flux2  # looked up at call time: tests stand in the model build
from dit_lora.families.flux2.encoders import out_layers, text_depth
from dit_lora.families.flux2.state import DEV_PIPELINE, KLEIN_PIPELINE, Flux2Run
from dit_lora.kit.builder import AnyAspect, check_divisible
from dit_lora.kit.components import DiffusionNotes, Fp32VaePrecision, ShapesDemo
from dit_lora.kit.loader import (
    DiffusionModel,
    LoadedParts,
    PipelineParts,
    TextEncoder,
    folder_pipeline,
    index_pipeline,
)
from dit_lora.modelfiles.pipeline_files import read_component_config

if TYPE_CHECKING:
    from dit_lora.config.schema import LoraOptions, TrainConfig

#: the latent stride: the VAE's 8x times the 2x2 patch (``Flux2Pipeline.check_inputs``: sizes divisible by 16)
LATENT_STRIDE = 16
#: ``FamilySpec.image_buckets``: any aspect ratio (the transformer takes any token grid: RoPE position ids, no
#: positional table), in steps of the latent stride
BUCKETS = AnyAspect(LATENT_STRIDE)
#: the family's pipelines (``FamilyInfo.pipeline_classes``; a folder's is read off its ``model_index.json``: the kit's
#: ``folder_pipeline``, dev when it names neither)
PIPELINES = (DEV_PIPELINE, KLEIN_PIPELINE)
#: the text encoder class each pipeline loads when ``model_index.json`` cannot be read
TEXT_ENCODERS = {DEV_PIPELINE: "Mistral3ForConditionalGeneration", KLEIN_PIPELINE: "Qwen3ForCausalLM"}


def index_text_encoder(index: dict) -> str:
    """The text encoder class ``model_index.json`` names (dev: Mistral 3, klein: Qwen3), else its pipeline's."""
    return (index.get("text_encoder") or [None, TEXT_ENCODERS[index_pipeline(index, PIPELINES)]])[1]


def check_resolution(resolution: int) -> None:
    """Refuse a ``--resolution`` that is not a multiple of the latent stride, naming the nearest that are."""
    why = (
        f"FLUX.2's latents are 8x smaller than the image and packed in 2x2 patches, and its pipelines take only "
        f"sizes divisible by {LATENT_STRIDE} (see --resolution)"
    )
    check_divisible(resolution, LATENT_STRIDE, why)


class Flux2Model(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and text
    encoder in the run's weight dtype, the VAE in fp32 (its batch-norm statistics normalise the latents), and the
    tokenizer."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers FLUX.2 folder of safetensors whose tokenizer can load, at a size the pipelines take."""
        self.check_folder(cfg)
        check_resolution(cfg.data.resolution)

    def text_encoder_class(self, cfg: TrainConfig, encoder: TextEncoder) -> str:
        """:func:`index_text_encoder` of the folder."""
        return index_text_encoder(read_component_config(cfg.model, "", "model_index.json") or {})

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """:func:`flux2_components` of the folder's pipeline."""
        return flux2_components(folder_pipeline(cfg.model, PIPELINES), loaded)

    def lora_targets(self, model: torch.nn.Module, lora: LoraOptions) -> list[str]:
        """``--lora_layers``, else diffusers' FLUX.2 script's default: the double blocks' image-stream attention
        (``to_q``, ``to_k``, ``to_v``, ``to_out.0``) and the single blocks' fused ``to_qkv_mlp_proj`` and
        ``attn.to_out`` (each single block named: a bare ``to_out`` would also match the double blocks' list)."""
        if lora.lora_layers:
            return list(lora.lora_layers)
        singles = len(getattr(model, "single_transformer_blocks", ()))
        return [*self.info.default_lora_layers, *(f"single_transformer_blocks.{i}.attn.to_out" for i in range(singles))]


def flux2_components(pipeline: str, loaded: LoadedParts, text: TextSettings | None = None) -> Components:
    """The components of ``loaded`` (from the folder, or on the meta device for a plan) with what the folder is in
    the run's :class:`Flux2Run`: dev or klein, the guidance embedding, the text encoder's layers read."""
    layers = out_layers(pipeline, text_depth(loaded.text_encoder))
    return Flux2Run(pipeline_class=pipeline, out_layers=layers, text=text).components(loaded)


#: FLUX.2's pipeline folder, as the kit's loader reads it. The tokenizer alone, also for dev's PixtralProcessor
#: folder: encode_prompt sends it text only.
PARTS = PipelineParts(
    kind="FLUX.2",
    example_id="black-forest-labs/FLUX.2-klein-base-4B",
    transformer="Flux2Transformer2DModel",
    vae="AutoencoderKLFlux2",
    text_encoders=(TextEncoder(TEXT_ENCODERS[DEV_PIPELINE]),),  # the folder's own: Flux2Model.text_encoder_class
    precision=Fp32VaePrecision(),  # the transformer and text encoder in the run's weight dtype, the VAE in fp32
)


def build_demo(cfg: TrainConfig) -> None:
    """``FamilySpec.demo``'s model (:class:`~dit_lora.kit.components.ShapesDemo`): the tiny random
    FLUX.2 pipeline of ``--flux2_demo_variant`` (``demo.py``)."""
    tiny_flux2.build_tiny_flux2_pipeline(cfg.model.path, variant=cfg.family_options.flux2_demo_variant, seed=0)


#: ``FamilySpec.demo``: the tiny FLUX.2 of ``--flux2_demo_variant`` and the shapes, ``--resolution`` checked first
DEMO = ShapesDemo(build_demo, check=lambda cfg: check_resolution(cfg.data.resolution))


class Flux2Notes(DiffusionNotes):
    """``FamilySpec.notes``: a step-distilled klein model is said, as Z-Image-Turbo is; a guidance value given to a
    klein run, which has no guidance embedding, is said to do nothing."""

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """The warnings for a klein folder (none for dev or a model that cannot be read)."""
        if not cfg.model.pretrained_model_name_or_path or cfg.model.demo:
            return []
        index = read_component_config(cfg.model, "", "model_index.json") or {}
        if index.get("_class_name") != KLEIN_PIPELINE:
            return []
        notes = []
        if index.get("is_distilled"):
            notes.append(
                "this is a step-distilled FLUX.2 [klein] model (model_index.json: is_distilled): a LoRA trained on "
                "it directly drifts the distillation. Prefer its base model (black-forest-labs/FLUX.2-klein-base-4B "
                "or -9B: the same architecture, the undistilled model the distilled ones were made from, what "
                "musubi-tuner and SimpleTuner recommend training), and validate a distilled model at its 4 steps, "
                "guidance 1"
            )
        if cfg.is_set("flux2_train_guidance"):
            notes.append(
                "--flux2_train_guidance does nothing here: FLUX.2 [klein] has no guidance embedding (only "
                "FLUX.2 [dev] is guidance-distilled); the validation samples' guidance is --validation_guidance_scale"
            )
        return notes
