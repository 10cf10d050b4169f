"""Loading a video LLM and saying what trains: the spec's ``model``, ``trainables``, ``precision`` and ``defaults``.

* LoRA on the language model's q/k/v/o/gate/up/down projections (only there: the vision tower has modules with the
  same names) at ``--learning_rate``; the projector trained fully at ``--backbone_learning_rate``; the vision tower
  frozen unless ``--train_vision_tower``.
* The model is loaded in bf16 whatever the checkpoint's dtype (fp32 with ``--mixed_precision no``, as the frozen
  weights of every family load in ``cfg.weight_dtype``); fp16 is refused as elsewhere. ``--quantize_base`` quantizes
  the language model only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.videollm.architecture import VideoLLMSpec, model_folder
from dit_lora.families.videollm.processing import QAProcessingLoader
from dit_lora.families.videollm.state import VideoLLMState
from dit_lora.modelfiles.pipeline_files import check_safetensors
from dit_lora.modeling import block_swap, quantize
from dit_lora.setup.tokenizer_check import check_tokenizer_packages

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from dit_lora.config.schema import FamilyOptions, LoraOptions, ModelOptions, TrainConfig
    from dit_lora.families.videollm.options import VideoChatOptions


def skip_placeholder_count_check(model: torch.nn.Module) -> None:
    """Stop transformers from reading a device tensor in every forward of a video LLM.

    ``get_placeholder_mask`` checks that the video tokens match the features with a tensor condition
    and an f-string that formats the token count (two host syncs per step, even when the check
    passes). It skips both when no features are passed, so the instance's method is wrapped to drop
    them; the spec already counts the video tokens on the host when each prompt is built.
    """
    inner = getattr(model, "model", model)
    original = getattr(inner, "get_placeholder_mask", None)
    if original is None:
        return

    def placeholder_mask(*args, **kwargs):
        kwargs.pop("image_features", None)
        kwargs.pop("video_features", None)
        return original(*args, **kwargs)

    inner.get_placeholder_mask = placeholder_mask


@dataclass(frozen=True)
class VideoLLMPrecision:
    """``FamilySpec.precision``: the model in the run's weight dtype; what ``--quantize_base`` leaves alone."""

    arch: VideoLLMSpec

    def expected_dtypes(self, comps, weight_dtype: torch.dtype) -> dict[str, torch.dtype]:
        """The model in the run's weight dtype."""
        return {"model": weight_dtype}

    def quantize_skip_modules(self) -> list[str]:
        """The language model is quantized; the vision tower, projector and output head stay in the weight dtype
        (small beside it), so --train_vision_tower and the projector still train on a quantized base."""
        return [m for m in (self.arch.vision_tower, self.arch.projector, "lm_head") if m]


@dataclass(frozen=True)
class VideoLLMModel:
    """``FamilySpec.model``: the config checks, the model with its processing, and the LoRA targets."""

    arch: VideoLLMSpec

    def validate_config(self, cfg: TrainConfig) -> None:
        """Known --lora_layers; the model's folder (a Hub id downloaded here, before the run prints anything) with
        safetensors weights and a loadable tokenizer; an existing --validation_video."""
        self.lora_layers(cfg.lora)  # before the data's clips are decoded: a typo costs seconds, not the data check
        if not cfg.model.pretrained_model_name_or_path:
            raise UserError("--pretrained_model_name_or_path is required: the video LLM to fine-tune.")
        check_safetensors(cfg.model, ("",), "video LLM")
        folder = model_folder(cfg.model, weights=True)
        check_tokenizer_packages(str(folder), "", None)
        if cfg.family_options.validation_video and not Path(cfg.family_options.validation_video).is_file():
            raise UserError(
                f"--validation_video `{cfg.family_options.validation_video}` does not exist. Point it at a "
                "clip, or "
                "leave it unset to ask about the first training clip."
            )

    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        """The frozen model on ``device``, and the run's state holding its processing."""
        path = model_folder(cfg.model, weights=True)  # a Hub id's snapshot, downloaded when validated
        # bf16 whatever the checkpoint holds (VideoChat2's fp16 Mistral is where its NaN reports come from), or fp32
        # when --mixed_precision no asks for it (fp16 was refused in validation).
        skip = VideoLLMPrecision(self.arch).quantize_skip_modules()
        model = self.arch.load_model(
            path, cfg.weight_dtype, quantization_config=quantize.transformers_config(cfg.model, cfg.weight_dtype, skip)
        )
        model.requires_grad_(False)
        quantize.after_loading(cfg.model, model, skip, device)  # --quantize_base fp8_scaled, before the device
        quantize.keep_4bit_layout(model)
        skip_placeholder_count_check(model)
        # --blocks_to_swap: those blocks' frozen weights stay in host memory through .to(device)
        block_swap.park_blocks(model, (self.arch.decoder_layers,), cfg.performance.blocks_to_swap, device)
        model.to(device)
        processing = QAProcessingLoader(self.arch).load_processing(str(path), model.config)
        return Components(model=model, state=VideoLLMState(processing))

    def lora_layers(self, lora: LoraOptions) -> set[str]:
        """The projection names --lora_layers picks: the family's default set when unset or ``all`` (LLaMA-Factory's
        ``lora_target: all``, its default), else the names given; a name that is none of the language model's
        projections is refused in one paragraph."""
        given = list(lora.lora_layers)
        unknown = [name for name in given if name != "all" and name not in self.arch.lora_projections]
        if unknown:
            raise UserError(
                f"--lora_layers {' '.join(unknown)}: not a projection of the language model of --family "
                f"{self.arch.name}. The video LLMs put LoRA on the language model's projections, named by their last "
                f"part: {', '.join(self.arch.lora_projections)} (`all`, the default, is every one of them). Name "
                "some of those, or leave --lora_layers unset."
            )
        return set(self.arch.lora_projections) if not given or "all" in given else set(given)

    def lora_targets(self, model: torch.nn.Module, lora: LoraOptions) -> list[str]:
        """Full names of the language model's projections (suffixes would also hit the vision tower)."""
        wanted = self.lora_layers(lora)
        prefix = self.arch.language_model + "."
        names = [
            n
            for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and n.startswith(prefix) and n.rsplit(".", 1)[-1] in wanted
        ]
        if not names:
            raise UserError(
                f"--lora_layers {sorted(wanted)} match no Linear layer of the language model "
                f"({self.arch.language_model}); valid: {', '.join(self.arch.lora_projections)}."
            )
        return names


@dataclass(frozen=True)
class VideoLLMTrainables:
    """``FamilySpec.trainables``: the projector beside LoRA, the vision tower on request, transformers' checkpointing."""

    arch: VideoLLMSpec

    def backbone_patterns(self, lora: LoraOptions, family_options: FamilyOptions) -> list[str]:
        """``--train_backbone``, else the projector (trained fully at ``--backbone_learning_rate``)."""
        return list(lora.train_backbone) or [re.escape(self.arch.projector) + r"\..*"]

    def extra_trainable(self, family_options: FamilyOptions) -> list[tuple[str, list[str], float]]:
        """The vision tower at ``--vision_tower_learning_rate`` with ``--train_vision_tower``, else nothing."""
        options = cast("VideoChatOptions", family_options)  # a video LLM's run holds its own options class
        if not options.train_vision_tower:
            return []
        return [
            (
                "vision_tower",
                [re.escape(self.arch.vision_tower) + r"\..*"],
                options.vision_tower_learning_rate,
            )
        ]

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """transformers' switch, non-reentrant (the frozen embeddings give the inputs no gradient)."""
        transformers_model = cast("PreTrainedModel", model)  # a video LLM is a transformers model
        transformers_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


class VideoLLMDefaults:
    """``FamilySpec.defaults``: what a video LLM no catalogue entry matches trains with."""

    def generic_defaults(self, model: ModelOptions, family_options: FamilyOptions) -> dict[str, tuple[Any, str]]:
        """One clip per step: a clip's frames are hundreds to thousands of vision tokens."""
        return {"train_batch_size": (1, "video: one clip per step (a clip is hundreds of vision tokens)")}
