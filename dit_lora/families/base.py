"""The contract between the generic training loop and one model family.

A family implements :class:`ModelFamily` once; the loop, checkpointing and saving code only ever call
these methods, so adding a family never adds a branch elsewhere.
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
    """The loaded model parts of a run. ``model`` is the module that gets LoRA: a diffusion
    transformer, or a video LLM (vision tower, projector and language model)."""

    model: torch.nn.Module
    scheduler: Any = None  # the training noise schedule (diffusion); None for language models
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
    """The spec the training loop calls for one model family (torchtitan's ``TrainSpec`` shape).

    Load the components, build the data, name what trains, compute the loss, save the adapter and load
    it back into the real consumer, sample, and describe the run on the model card. Diffusion families
    share :class:`~dit_lora.families.diffusion.DiffusionFamily` (encoders, latent cache, VAE); the video
    LLM implements this spec directly.
    """

    #: registry name, used by ``--family``
    name: str = ""
    #: default LoRA targets when --lora_layers is empty
    default_lora_layers: tuple[str, ...] = ()
    #: model-card tags besides `lora` and `dit-lora`
    card_tags: tuple[str, ...] = ()
    #: consumer class name (a diffusers pipeline or a transformers model) shown in the model card
    pipeline_class_name: str = ""
    #: file the adapter is saved to (what `load_lora_weights` reads by default)
    adapter_weight_name: str = "pytorch_lora_weights.safetensors"
    #: gradient checkpointing when --gradient_checkpointing is unset
    gradient_checkpointing_default: bool = False
    #: the recipe script that trains this family (default ``<name>_lora.py``)
    recipe: str = ""
    #: the model card's ``library_name`` (the library that loads the adapter) and ``pipeline_tag``
    library_name: str = "diffusers"
    pipeline_tag: str | None = None
    #: the text encoder ``--quantize_text_encoder`` loads nf4-quantized, as users know it (None: the family has
    #: none, and the flag is refused)
    text_encoder_label: str | None = None
    #: --compile blocks: the class names of the repeated blocks to compile (empty: the model's own
    #: ``_repeated_blocks`` or ``_no_split_modules``); see :mod:`dit_lora.training.compile`
    repeated_block_classes: tuple[str, ...] = ()
    #: --compile: dynamic shapes from the first call (a new sequence length nearly every batch) instead of
    #: one static graph per batch shape
    compile_dynamic: bool = False

    @property
    def recipe_script(self) -> str:
        """``recipes/<...>_lora.py`` that trains this family."""
        return f"recipes/{self.recipe or self.name + '_lora.py'}"

    # ---- setup ------------------------------------------------------------------------------
    @abstractmethod
    def validate_config(self, cfg: TrainConfig) -> None:
        """Family-specific checks that read only small config files (never weights)."""

    @abstractmethod
    def prepare_demo(self, cfg: TrainConfig) -> None:
        """Create the tiny offline model and dataset named in ``cfg`` when missing."""

    @abstractmethod
    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        """Load the model that gets LoRA (bf16, frozen) and whatever else the family needs, on ``device``."""

    def quantize_skip_modules(self, cfg: TrainConfig) -> list[str]:
        """Modules of the trained model that ``--quantize_base`` leaves unquantized (beyond the library's own
        ``_keep_in_fp32_modules``): none for the diffusion transformers, everything but the language model
        for the video LLMs."""
        return []

    def generic_defaults(self, cfg: TrainConfig) -> dict[str, tuple[Any, str]]:
        """Defaults for a model no catalogue entry matches: ``{option: (value, why)}``, derived from the model's
        own small configs (e.g. the resolution its ``sample_size`` implies). A catalogue entry's values replace
        these; options the user set win over both."""
        return {}

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """Record per-run settings (prompt prefixes, lengths, a fused loss) once the components are loaded."""

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """Lines shown at start saying what the family chose from the checkpoint (e.g. a video size) and why."""
        return []

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """Warnings about the checkpoint's stored precision, shown before training."""
        return []

    def expected_dtypes(self, comps: Components, cfg: TrainConfig) -> dict[str, torch.dtype]:
        """The precision policy: dtype every floating parameter/buffer of each component should have.

        Keys are ``"model"`` or names in ``comps.encoders``; trainable (LoRA) parameters are always
        expected in fp32 and are checked separately.
        """
        return {"model": cfg.weight_dtype}

    # ---- data -------------------------------------------------------------------------------
    @abstractmethod
    def data_handler(self, cfg: TrainConfig):
        """How this family's samples are listed, screened, checked, preprocessed and batched.

        A :class:`~dit_lora.data.prepare.MediaHandler`; training (:meth:`build_data`) and ``check-data``
        both get their screening from it.
        """

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Check the screened samples against the loaded model before anything is encoded.

        E.g. DiT compares the dataset's class count with the model's class embedding here. Raise
        ``UserError`` on a mismatch.
        """

    def build_data(self, cfg: TrainConfig, comps: Components, accelerator):
        """The training data: samples listed and screened by :meth:`data_handler`, a dataset and its collate.

        Returns a :class:`~dit_lora.data.prepare.PreparedData`.
        """
        from ..data.prepare import prepare_data

        return prepare_data(cfg, self, comps, accelerator)

    def prepare_batch(self, comps: Components, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """A collated batch as the step's inputs on ``device`` (the loop and the fault replay both call this)."""
        return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    # ---- what trains ------------------------------------------------------------------------
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

    @abstractmethod
    def compute_loss(
        self, comps: Components, model: torch.nn.Module, batch: dict[str, Any], generator: torch.Generator, cfg: TrainConfig
    ) -> torch.Tensor:
        """The training loss (scalar) of one micro-batch from :meth:`prepare_batch`."""

    # ---- samples ----------------------------------------------------------------------------
    @abstractmethod
    def validation_inputs(self, comps: Components, cfg: TrainConfig) -> dict[str, Any]:
        """What :meth:`generate` needs for ``--validation_prompt``, prepared while the encoders are loaded."""

    @abstractmethod
    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Validation samples from the in-memory model, given :meth:`validation_inputs`."""

    def save_sample(self, sample: Any, stem: Path) -> Path:
        """Write one validation sample (a PIL image here) as ``stem`` + extension; return the path."""
        from ..fileio import atomic_write

        path = Path(stem).with_suffix(".png")
        atomic_write(path, lambda tmp: sample.save(tmp, format="PNG"))  # replaces a link there, never follows it
        return path

    # ---- the adapter and its consumer -------------------------------------------------------
    @abstractmethod
    def save_adapter(self, output_dir: Path, lora_state: dict[str, torch.Tensor], lora_config: dict) -> Path:
        """Write the adapter with the consumer's own saver so it reloads at the trained strength."""

    @abstractmethod
    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device):
        """A fresh consumer (pipeline or model) from the base model with the saved adapter loaded by the real loader."""

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir: Path) -> None:
        """Reshape a consumer pipeline to fit a saved adapter before its weights load (``dit_lora.load_adapter``).

        E.g. DiT resizes the class embedding to the trained class count and installs the class names.
        """

    def attach_adapter(self, pipe, adapter_dir: str | Path, adapter_name: str | None = None):
        """Load a saved adapter into the consumer ``pipe`` (fitted first by :meth:`prepare_pipeline_for_adapter`)."""
        from ..output.adapter import adapter_folder, load_adapter_files

        folder = adapter_folder(adapter_dir)
        self.prepare_pipeline_for_adapter(pipe, folder)
        return load_adapter_files(pipe, folder, adapter_name)

    @abstractmethod
    def generate_with_pipeline(self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int) -> list:
        """Samples from the consumer (used for the final, reloaded-adapter validation)."""

    # ---- memory plan (``dit-lora plan``) -----------------------------------------------------
    #: the config value that counts ``model``'s repeated blocks, as ``(config file, key)``: the planner traces
    #: one and two blocks and extrapolates to the real depth
    depth_key: tuple[str, str] = ("transformer/config.json", "num_layers")

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What :meth:`load_components` loads, built from configs on the meta device (no weights are read).

        ``read(subfolder, filename)`` returns a small JSON config; ``depth`` cuts ``model`` to that many
        repeated blocks (:attr:`depth_key`).
        """
        raise NotImplementedError(f"the memory planner does not cover the {self.name} family yet")

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """``[(bucket, batch)]``: one micro-batch per bucket as :meth:`prepare_batch` hands it to the step.

        Called under a fake-tensor mode with :meth:`plan_components`' modules, so tensors have shapes only.
        """
        raise NotImplementedError(f"the memory planner does not cover the {self.name} family yet")

    def plan_loss(self, comps: Components, batch: dict[str, Any], generator: torch.Generator,
                  cfg: TrainConfig) -> torch.Tensor:
        """The loss the planner traces (on fake tensors): :meth:`compute_loss` unless that reads tensor values."""
        return self.compute_loss(comps, comps.model, batch, generator, cfg)

    # ---- model card -------------------------------------------------------------------------
    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        """Python code for the model card that loads the adapter and generates."""
        raise NotImplementedError

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """Family-specific rows for the model card's training-settings table."""
        return {}

    def base_model_license(self, cfg: TrainConfig) -> str | None:
        """License string of the base model for the model card, when known."""
        return None
