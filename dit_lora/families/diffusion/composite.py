"""TRANSITIONAL: :class:`DiffusionFamily`, the old-style composite of the diffusion components.

DiT, Wan, CogVideoX and the test folder's toy family still subclass it (one object that is every component, served
as a spec by :func:`~dit_lora.contract.legacy.spec_from_family`); Sana fills its spec from the component bases of
:mod:`dit_lora.families.diffusion.components`. Its methods call the same shared functions as those bases, so the
behaviour is written once. This module goes when the last of them is converted.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.capabilities import Captions, Encoders
from dit_lora.contract.family import Components, ModelFamily
from dit_lora.contract.legacy import as_spec
from dit_lora.contract.spec import bucket_stride
from dit_lora.families.diffusion import components as shared


class DiffusionFamily(ModelFamily):
    """A diffusion transformer trained on cached (or on-the-fly) VAE latents and prompt embeddings.

    Declares :class:`~.capabilities.Encoders` and :class:`~.capabilities.Captions`; a subclass adds what it
    implements (``capabilities = DiffusionFamily.capabilities + (Samples, ...)``). The hooks below with a
    default (notes, setup, trainables, PNG samples, plan loss) are the diffusers defaults a subclass inherits
    when it declares the capability they belong to.
    """

    capabilities = (Encoders, Captions)

    #: where a sample's caption comes from: "captions" (metadata/.txt/column) or "class_folders"
    #: (class-conditional: a folder without metadata gives each image its sub-folder's name)
    caption_source: str = "captions"
    #: whether a sample with an empty caption is unusable (skipped and quarantined)
    requires_captions: bool = True

    # ---- encoding ---------------------------------------------------------------------------
    @abstractmethod
    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """:meth:`DiffusionEncoders.cache_identity <dit_lora.families.diffusion.components.DiffusionEncoders.cache_identity>`."""

    @abstractmethod
    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """:meth:`DiffusionEncoders.encode_images <dit_lora.families.diffusion.components.DiffusionEncoders.encode_images>`."""

    @abstractmethod
    def encode_prompts(self, comps: Components, captions: list[str], *, with_negative: bool = False) -> dict[str, torch.Tensor]:
        """:meth:`DiffusionEncoders.encode_prompts <dit_lora.families.diffusion.components.DiffusionEncoders.encode_prompts>`."""

    # ---- data -------------------------------------------------------------------------------
    def data_handler(self, cfg: TrainConfig):
        """Images by default; video families return a :class:`~dit_lora.data.video_prepare.VideoMedia`."""
        return shared.DiffusionData().data_handler(cfg, self)

    def build_data(self, cfg: TrainConfig, comps: Components, accelerator):
        """List, screen and cache the samples; with the cache built, release the encoders (they are done)."""
        return shared.prepare_and_release(cfg, self, comps, accelerator)

    def prepare_batch(self, comps: Components, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """Cached batches move to ``device``; raw ones are encoded here, every step (``--cache_latents false``)."""
        return shared.encoded_batch(self, comps, batch, device, cached)

    def release_encoders(self, comps: Components, keep_for_validation: bool) -> None:
        """Drop every encoder after caching; keep the VAE, parked on the CPU, when validation decodes."""
        shared.release_encoders(comps, keep_for_validation)

    # ---- defaults of optional hooks (used when a subclass declares their capability) ----------
    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """:class:`~.capabilities.RunNotes`: no start lines."""
        return []

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """:class:`~.capabilities.RunNotes`: no precision warnings."""
        return []

    def quantize_skip_modules(self, cfg: TrainConfig) -> list[str]:
        """:class:`~.capabilities.Precision`: ``--quantize_base`` quantizes every Linear of the transformer."""
        return []

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """:class:`~.capabilities.RunSetup`: nothing to record."""

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """:class:`~.capabilities.RunSetup`: nothing to check."""

    def backbone_patterns(self, cfg: TrainConfig) -> list[str]:
        """:class:`~.capabilities.Trainables`: ``--train_backbone``."""
        return list(cfg.train_backbone)

    def extra_trainable(self, cfg: TrainConfig) -> list[tuple[str, list[str], float]]:
        """:class:`~.capabilities.Trainables`: no further groups."""
        return []

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """:class:`~.capabilities.Trainables`: diffusers models' own switch."""
        model.enable_gradient_checkpointing()

    # ---- samples ----------------------------------------------------------------------------
    def validation_inputs(self, comps: Components, cfg: TrainConfig) -> dict[str, Any]:
        """``--validation_prompt`` encoded with its classifier-free-guidance negative, before the encoders go."""
        return self.encode_prompts(comps, [cfg.validation_prompt], with_negative=True)

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """Write one validation sample (a PIL image here) as ``stem.png``; return the path."""
        return shared.save_png(sample, stem)

    @contextmanager
    def vae_on(self, comps: Components, device: torch.device) -> Iterator[Any]:
        """The VAE on ``device`` for a validation decode, then back where it waits between validations."""
        with shared.vae_on(comps, device) as vae:
            yield vae

    # ---- memory plan ------------------------------------------------------------------------
    #: the config value that counts ``model``'s repeated blocks, as ``(config file, key)``: the planner traces
    #: two and three blocks and extrapolates to the real depth
    depth_key: tuple[str, str] = ("transformer/config.json", "num_layers")

    def plan_loss(self, comps: Components, batch: dict[str, Any], generator: torch.Generator,
                  cfg: TrainConfig) -> torch.Tensor:
        """The loss the planner traces (on fake tensors): :meth:`compute_loss` on the planned model."""
        return self.compute_loss(comps, comps.model, batch, generator, cfg)

    def pixel_batches(self, cfg: TrainConfig) -> list[tuple[str, tuple[int, ...]]]:
        """``[(bucket, shape)]`` of one micro-batch of pixels per bucket: images ``(B, 3, H, W)``; video overrides.

        The run's largest image bucket is planned (the most pixels, so the most tokens; the square on a tie): a fixed
        ``--aspect_buckets WxH``, that size; else the ``--resolution`` square, which bounds every ``auto`` bucket.
        """
        return shared.image_pixel_batches(cfg, bucket_stride(as_spec(self), cfg)[0])

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """The cached conditioning of ``batch_size`` samples (caption embeddings, class labels), as empty tensors."""
        raise NotImplementedError(f"the memory planner does not cover the {self.name} family yet")

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """Each bucket's pixels through the family's own :meth:`encode_images` (the cache step), plus conditioning."""
        return shared.encoded_plan_batches(lambda px: self.encode_images(comps, px), self.pixel_batches(cfg),
                                           lambda size: self.plan_conditioning(comps, cfg, size))
