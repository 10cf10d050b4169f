"""The contract between the generic training loop and one model family.

A family module implements :class:`ModelFamily` once; the loop, caching, checkpointing and
saving code only ever call these methods, so adding a family never adds a branch elsewhere.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import TrainConfig


@dataclass
class Components:
    """The loaded model parts a family needs. ``denoiser`` is the module that gets LoRA."""

    denoiser: torch.nn.Module
    scheduler: Any
    encoders: dict[str, Any] = field(default_factory=dict)  # e.g. vae, text_encoder, tokenizer
    extras: dict[str, Any] = field(default_factory=dict)


def schedule_on_device(scheduler, device: torch.device):
    """``scheduler`` with its ``alphas_cumprod`` table on ``device``, once at load.

    diffusers' ``add_noise``/``get_velocity`` move the table to the samples' device on first use;
    doing it here keeps that blocking host-to-device copy out of every training step.
    """
    scheduler.alphas_cumprod = scheduler.alphas_cumprod.to(device)
    return scheduler


class ModelFamily(ABC):
    """One model family: how to load, encode, noise, compute the loss, save and sample."""

    #: registry name, used by ``--family``
    name: str = ""
    #: default LoRA targets when --lora_layers is empty
    default_lora_layers: tuple[str, ...] = ()
    #: model-card tags besides `lora` and `dit-lora`
    card_tags: tuple[str, ...] = ()
    #: diffusers pipeline class name shown in the model card
    pipeline_class_name: str = ""
    #: file the adapter is saved to (what `load_lora_weights` reads by default)
    adapter_weight_name: str = "pytorch_lora_weights.safetensors"
    #: where a sample's caption comes from: "captions" (metadata/.txt/column) or "class_folders"
    #: (class-conditional: a folder without metadata gives each image its sub-folder's name)
    caption_source: str = "captions"
    #: whether a sample with an empty caption is unusable (skipped and quarantined)
    requires_captions: bool = True
    #: what one training sample is: "image" (pixels ``(B, 3, H, W)``) or "video" (pixels ``(B, F, 3, H, W)``,
    #: decoded to the buckets of :meth:`video_buckets`)
    media: str = "image"
    #: gradient checkpointing when --gradient_checkpointing is unset
    gradient_checkpointing_default: bool = False
    #: the recipe script that trains this family (default ``<name>_lora.py``)
    recipe: str = ""
    #: the model card's ``library_name`` (the library that loads the adapter) and ``pipeline_tag``
    library_name: str = "diffusers"
    pipeline_tag: str | None = None

    @property
    def recipe_script(self) -> str:
        """``recipes/<...>_lora.py`` that trains this family."""
        return f"recipes/{self.recipe or self.name + '_lora.py'}"

    @abstractmethod
    def validate_config(self, cfg: TrainConfig) -> None:
        """Family-specific checks that read only small config files (never weights)."""

    @abstractmethod
    def prepare_demo(self, cfg: TrainConfig) -> None:
        """Create the tiny offline model and dataset named in ``cfg`` when missing."""

    @abstractmethod
    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        """Load the denoiser (bf16, frozen) and the encoders, placed on ``device``."""

    @abstractmethod
    def cache_identity(self, cfg: TrainConfig) -> dict[str, Any]:
        """Everything besides the sample that changes the encoded latents/embeddings."""

    @abstractmethod
    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Pixels in [-1, 1] -> scaled latents in fp32.

        Images: ``(B, 3, H, W)`` -> a latent tensor. Videos: ``(B, F, 3, H, W)`` -> a latent tensor or a dict
        with ``"latents"`` plus other per-sample tensors the loss needs (e.g. ``"image_latents"``); every
        entry is cached beside the caption embeddings and arrives in the batch under its own key.
        """

    def video_buckets(self, cfg: TrainConfig) -> list[tuple[int, int, int]]:
        """Video families: the validated (frames, height, width) buckets clips are decoded to."""
        raise NotImplementedError(f"{type(self).__name__} trains images")

    @abstractmethod
    def encode_prompts(self, comps: Components, captions: list[str], *, with_negative: bool = False) -> dict[str, torch.Tensor]:
        """Captions -> conditioning tensors (batched along dim 0); ``with_negative`` adds the CFG negative."""

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """Record per-run encoding settings (prompt prefixes, lengths) on the loaded components."""

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Check the listed dataset against the loaded model before anything is encoded.

        Called once with the usable samples (e.g. DiT compares the dataset's class count with the
        model's class embedding here and records the label map). Raise ``UserError`` on a mismatch.
        """

    def expected_dtypes(self, comps: Components, cfg: TrainConfig) -> dict[str, torch.dtype]:
        """The precision policy: dtype every floating parameter/buffer of each component should have.

        Keys are ``"denoiser"`` or names in ``comps.encoders``; trainable (LoRA) parameters are always
        expected in fp32 and are checked separately.
        """
        return {"denoiser": cfg.weight_dtype}

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """Warnings about the checkpoint's stored precision, shown before training."""
        return []

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """Lines shown at start saying what the family chose from the checkpoint (e.g. a video size) and why."""
        return []

    @abstractmethod
    def release_encoders(self, comps: Components, keep_for_validation: bool) -> None:
        """Free the encoders after caching; keep what validation needs off the accelerator."""

    @abstractmethod
    def compute_loss(
        self, comps: Components, denoiser: torch.nn.Module, batch: dict[str, Any], generator: torch.Generator, cfg: TrainConfig
    ) -> torch.Tensor:
        """The training loss (scalar) for one micro-batch with ``latents`` and conditioning."""

    @abstractmethod
    def generate(
        self, comps: Components, denoiser: torch.nn.Module, cond: dict[str, torch.Tensor], cfg: TrainConfig, seed: int
    ) -> list:
        """Validation images from the in-memory model, with pre-encoded prompt conditioning."""

    @abstractmethod
    def save_adapter(self, output_dir: Path, lora_state: dict[str, torch.Tensor], lora_config: dict) -> Path:
        """Write the adapter with the consumer's own saver so it reloads at the trained strength."""

    @abstractmethod
    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device):
        """A fresh pipeline from the base model with the saved adapter loaded by the real consumer."""

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir: Path) -> None:
        """Reshape a consumer pipeline to fit a saved adapter before its weights load (``dit_lora.load_adapter``).

        E.g. DiT resizes the class embedding to the trained class count and installs the class names.
        """

    @abstractmethod
    def generate_with_pipeline(self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int) -> list:
        """Images from a consumer pipeline (used for the final, reloaded-adapter validation)."""

    def lora_targets(self, model: torch.nn.Module, cfg: TrainConfig) -> list[str]:
        """Module names (or name suffixes) that get LoRA layers: ``--lora_layers`` or the family's default."""
        return list(cfg.lora_layers or self.default_lora_layers)

    def backbone_patterns(self, cfg: TrainConfig) -> list[str]:
        """Regexes of original weights trained at ``--backbone_learning_rate`` (``--train_backbone``)."""
        return list(cfg.train_backbone)

    def extra_trainable(self, cfg: TrainConfig) -> list[tuple[str, list[str], float]]:
        """Further original weights trained in a group of their own: ``(label, regexes, learning rate)``."""
        return []

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """Turn on activation checkpointing (diffusers models; transformers models name it differently)."""
        model.enable_gradient_checkpointing()

    def save_sample(self, sample: Any, stem: Path) -> Path:
        """Write one validation sample (a PIL image here) as ``stem`` + extension; return the path."""
        path = Path(stem).with_suffix(".png")
        sample.save(path)
        return path

    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        """Python code for the model card that loads the adapter and generates."""
        raise NotImplementedError

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """Family-specific rows for the model card's training-settings table."""
        return {}

    def base_model_license(self, cfg: TrainConfig) -> str | None:
        """License string of the base model for the model card, when known."""
        return None
