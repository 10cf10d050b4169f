"""Krea 2's model component and what is read from its small config files before anything loads: the config checks
(Krea-2-Turbo, step-distilled, refused), the text encoder's tapped layers, its buckets and ``--demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.krea2 import demo as tiny_krea2  # looked up at call time: tests stand in the model build
from dit_lora.families.krea2.state import Krea2Run, tapped_layers
from dit_lora.kit import packed
from dit_lora.kit.components import Fp32VaePrecision, ShapesDemo
from dit_lora.kit.loader import DiffusionModel, LoadedParts, published_parts
from dit_lora.modelfiles.pipeline_files import read_component_config

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def check_resolution(resolution: int) -> None:
    """The kit's refusal of a ``--resolution`` Krea2Pipeline cannot take (sizes divisible by 16)."""
    packed.check_resolution(resolution, "Krea 2", "Krea2Pipeline")


def refuse_turbo(cfg: TrainConfig, index: dict) -> None:
    """Krea-2-Turbo (``is_distilled`` in its ``model_index.json``: distilled to sample in 8 steps without
    classifier-free guidance) is refused in one paragraph, with what to train instead."""
    named = "krea-2-turbo" in str(cfg.model.pretrained_model_name_or_path).lower()
    if not index.get("is_distilled") and not named:
        return
    raise UserError(
        f"`{cfg.model.pretrained_model_name_or_path}` is Krea-2-Turbo (or another step-distilled Krea 2: its "
        "model_index.json sets is_distilled), distilled to sample in 8 steps without classifier-free guidance: a "
        "LoRA trained on it directly erodes that distillation. Pass --pretrained_model_name_or_path "
        "krea/Krea-2-Raw, the base Krea publishes for fine-tuning; a LoRA trained there loads into Krea-2-Turbo's "
        "Krea2Pipeline too (Krea's and diffusers' advice: train on Raw, sample on Turbo)."
    )


def check_taps(cfg: TrainConfig, index: dict) -> None:
    """The folder's ``text_encoder_select_layers`` must be as many as the transformer fuses and within the text
    encoder's layers (Krea2Pipeline's docstring): else the caption cache would be built and the first step fail."""
    if not index:
        return
    taps = tapped_layers(index)
    fused = (read_component_config(cfg.model, "transformer") or {}).get("num_text_layers")
    encoder = read_component_config(cfg.model, "text_encoder") or {}
    layers = (encoder.get("text_config") or encoder).get("num_hidden_layers")
    wrong = []
    if fused is not None and len(taps) != int(fused):
        wrong.append(f"{len(taps)} layers where the transformer fuses num_text_layers={fused}")
    if layers is not None and max(taps) > int(layers):
        wrong.append(f"layer {max(taps)} of a text encoder with {layers} (hidden state 0 is its embeddings)")
    if wrong:
        raise UserError(
            f"`{cfg.model.pretrained_model_name_or_path}`'s model_index.json taps the text encoder at "
            f"text_encoder_select_layers={list(taps)}: {'; '.join(wrong)}. Fix text_encoder_select_layers in "
            "model_index.json (Krea-2-Raw's are 2, 5, ..., 35: 12 layers of Qwen3-VL-4B's 36), or pass the "
            "checkpoint's own folder as --pretrained_model_name_or_path."
        )


class Krea2Model(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and Qwen3-VL
    in the run's weight dtype, the VAE in fp32."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """Not Turbo; a diffusers Krea2Pipeline folder of safetensors whose tokenizer loads, at a size the pipeline
        takes."""
        index = read_component_config(cfg.model, "", "model_index.json") or {}
        refuse_turbo(cfg, index)
        self.check_folder(cfg)
        check_taps(cfg, index)
        check_resolution(cfg.data.resolution)

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """:func:`krea2_components` of the loaded parts, with the folder's tapped layers."""
        index = read_component_config(cfg.model, "", "model_index.json") or {}
        return krea2_components(loaded, Krea2Run(select_layers=tapped_layers(index)))


def krea2_components(loaded: LoadedParts, state: Krea2Run | None = None) -> Components:
    """The components of ``loaded`` (from the folder, or on the meta device for a plan) with what the checkpoint is
    in the run's :class:`Krea2Run`."""
    return (state or Krea2Run()).components(loaded)


class Krea2Precision(Fp32VaePrecision):
    """The transformer and Qwen3-VL in the run's weight dtype, the VAE in fp32; the embedders, the timestep network,
    the text fusion (its projector weighs 12 layers with 12 inputs) and the output layer stay out of
    ``--quantize_base`` (diffusers skips ``time_embed`` and the norms in its own layerwise casting)."""

    def quantize_skip_modules(self) -> list[str]:
        """Everything but the 28 blocks."""
        return ["img_in", "time_embed", "time_mod_proj", "txt_in", "text_fusion", "final_layer"]


#: Krea 2's pipeline folder, as the kit's loader reads it: Qwen3-VL (its stacked hidden states) with its tokenizer;
#: the Qwen-Image VAE in fp32 (the latents are cached once from it)
PARTS = published_parts("krea/Krea-2-Raw", kind="Krea 2", precision=Krea2Precision())


#: ``FamilySpec.demo``: the tiny Krea 2 (``demo.py``) and the shapes, ``--resolution`` checked first
DEMO = ShapesDemo.tiny(tiny_krea2, "build_tiny_krea2_pipeline", check_resolution)
