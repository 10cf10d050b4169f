"""The contract between the generic training loop and one model family.

A family implements :class:`ModelFamily` once; the loop, checkpointing and saving code only ever call
these methods, so adding a family never adds a branch elsewhere.
"""

from __future__ import annotations

import weakref
from abc import ABCMeta, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the contract names these in its signatures only: it sits below dit_lora.config, and the
    # registry and `dit-lora --help` read it without torch
    import torch

    from dit_lora.config import TrainConfig


@dataclass
class Components:
    """The loaded model parts of a run. ``model`` is the module that gets LoRA: a diffusion
    transformer, or a video LLM (vision tower, projector and language model)."""

    model: torch.nn.Module
    scheduler: Any = None  # the training noise schedule (diffusion); None for language models
    encoders: dict[str, Any] = field(default_factory=dict)  # e.g. vae, text_encoder, tokenizer
    extras: dict[str, Any] = field(default_factory=dict)  # TRANSITIONAL: old-style families' per-run decisions
    #: what the run decided, as the family's own typed object (e.g. Sana's ``SanaRun``); None until it decides
    state: Any = None


def schedule_on_device(scheduler, device: torch.device):
    """``scheduler`` with its ``alphas_cumprod`` table on ``device``, once at load.

    diffusers' ``add_noise``/``get_velocity`` move the table to the samples' device on first use;
    doing it here keeps that blocking host-to-device copy out of every training step.
    """
    scheduler.alphas_cumprod = scheduler.alphas_cumprod.to(device)
    return scheduler


class _SpecMeta(ABCMeta):
    """Seals every family instance once its ``__init__`` returns (see :meth:`ModelFamily.__setattr__`)."""

    def __call__(cls, *args, **kwargs):
        instance = super().__call__(*args, **kwargs)
        _SEALED.add(instance)
        return instance


_SEALED: "weakref.WeakSet[ModelFamily]" = weakref.WeakSet()


class ModelFamily(metaclass=_SpecMeta):
    """The spec the training loop calls for one model family (torchtitan's ``TrainSpec`` shape).

    The REQUIRED part is the nine methods below: validate the config, load the components, name what gets
    LoRA, the data handler and the data, prepare a batch, the loss, save the adapter and load it back into the
    real consumer. Everything else (demo, samples, memory plan, model card, encoders, buckets, fused kernels, ...)
    is an optional capability (:mod:`dit_lora.contract.capabilities`) the family declares in ``capabilities``.

    A spec is immutable: setting an attribute after ``__init__`` raises. What a run decides (a frame rate, a
    conditioning image, a fused loss, a label map) goes into the objects the stages return, e.g. ``comps.extras``.
    Diffusion families share :class:`~dit_lora.families.diffusion.DiffusionFamily`.
    """

    # ---- descriptive attributes (12), plain class attributes ---------------------------------
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
    #: the model card's ``library_name`` (the library that loads the adapter) and ``pipeline_tag``
    library_name: str = "diffusers"
    pipeline_tag: str | None = None
    #: gradient checkpointing when --gradient_checkpointing is unset
    gradient_checkpointing_default: bool = False
    #: the text encoder ``--quantize_text_encoder`` loads nf4-quantized, as users know it (None: the family has
    #: none, and the flag is refused)
    text_encoder_label: str | None = None
    #: --compile blocks: the class names of the repeated blocks to compile (empty: the model's own
    #: ``_repeated_blocks`` or ``_no_split_modules``); see :mod:`dit_lora.training.compile`
    repeated_block_classes: tuple[str, ...] = ()
    #: --compile: dynamic shapes from the first call (a new sequence length nearly every batch) instead of
    #: one static graph per batch shape
    compile_dynamic: bool = False
    #: the optional capabilities this family implements (protocols of :mod:`dit_lora.contract.capabilities`)
    capabilities: tuple[type, ...] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if self in _SEALED:
            raise AttributeError(
                f"cannot set `{name}` on the {type(self).__name__} spec: a model family is immutable after "
                "construction. Keep what a run decides in the objects its stages return (e.g. `comps.extras`)."
            )
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if self in _SEALED:
            raise AttributeError(f"cannot delete `{name}` from the {type(self).__name__} spec: it is immutable.")
        super().__delattr__(name)

    # ---- the required contract (9 methods) ------------------------------------------------------
    @abstractmethod
    def validate_config(self, cfg: TrainConfig) -> None:
        """Family-specific checks that read only small config files (never weights)."""

    @abstractmethod
    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        """Load the model that gets LoRA (bf16, frozen) and whatever else the family needs, on ``device``."""

    def lora_targets(self, model: torch.nn.Module, cfg: TrainConfig) -> list[str]:
        """Module names (or name suffixes) that get LoRA layers: ``--lora_layers`` or the family's default."""
        return list(cfg.lora_layers or self.default_lora_layers)

    @abstractmethod
    def data_handler(self, cfg: TrainConfig):
        """How this family's samples are listed, screened, checked, preprocessed and batched.

        A :class:`~dit_lora.data.prepare.MediaHandler`; training (:meth:`build_data`) and ``check-data``
        both get their screening from it.
        """

    def build_data(self, cfg: TrainConfig, comps: Components, accelerator):
        """The training data: samples listed and screened by :meth:`data_handler`, a dataset and its collate.

        Returns a :class:`~dit_lora.data.prepare.PreparedData`, or None (this default) for the standard data path,
        :func:`dit_lora.data.prepare.prepare_data` with :meth:`data_handler`, which the training stage then runs
        (the contract imports no data module). A family that builds on the standard path calls ``prepare_data``
        itself (:class:`~dit_lora.families.diffusion.DiffusionFamily`).
        """
        return None

    def prepare_batch(self, comps: Components, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """A collated batch as the step's inputs on ``device`` (the loop and the fault replay both call this)."""
        import torch  # on use: importing the contract stays light (the module imports torch for typing only)

        return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    @abstractmethod
    def compute_loss(
        self, comps: Components, model: torch.nn.Module, batch: dict[str, Any], generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """The training loss (scalar) of one micro-batch from :meth:`prepare_batch`.

        ``batch["step"]`` is the 1-based update number the micro-batch belongs to (a host int, set by the loop and
        by a fault replay alike); absent when a caller builds a batch by hand (the planner, unit tests).
        """

    @abstractmethod
    def save_adapter(self, output_dir: Path, lora_state: dict[str, torch.Tensor], lora_config: dict) -> Path:
        """Write the adapter with the consumer's own saver so it reloads at the trained strength."""

    @abstractmethod
    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device):
        """A fresh consumer (pipeline or model) from the base model with the saved adapter loaded by the real loader."""


#: the names of the required contract, in the order above
REQUIRED = ("validate_config", "load_components", "lora_targets", "data_handler", "build_data", "prepare_batch",
            "compute_loss", "save_adapter", "load_pipeline_with_adapter")
