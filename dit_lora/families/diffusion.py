"""What every diffusion family shares: text/image encoders, the latent cache and the VAE.

A diffusion family (Sana, DiT, CogVideoX) encodes each sample once into latents and conditioning,
caches them (``--cache_latents``, the default) and then releases its encoders; without the cache it
encodes every batch on the fly. Validation decodes latents with the VAE, which waits off the
accelerator between validations. Subclasses say how to encode (:meth:`encode_images`,
:meth:`encode_prompts`) and what changes the encoding (:meth:`cache_identity`); this base does the rest.
"""

from __future__ import annotations

from abc import abstractmethod
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from ..config import TrainConfig
from .base import Components, ModelFamily


class DiffusionFamily(ModelFamily):
    """A diffusion transformer trained on cached (or on-the-fly) VAE latents and prompt embeddings."""

    #: where a sample's caption comes from: "captions" (metadata/.txt/column) or "class_folders"
    #: (class-conditional: a folder without metadata gives each image its sub-folder's name)
    caption_source: str = "captions"
    #: whether a sample with an empty caption is unusable (skipped and quarantined)
    requires_captions: bool = True

    # ---- encoding ---------------------------------------------------------------------------
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

    @abstractmethod
    def encode_prompts(self, comps: Components, captions: list[str], *, with_negative: bool = False) -> dict[str, torch.Tensor]:
        """Captions -> conditioning tensors (batched along dim 0); ``with_negative`` adds the CFG negative."""

    # ---- data -------------------------------------------------------------------------------
    def data_handler(self, cfg: TrainConfig):
        """Images by default; video families return a :class:`~dit_lora.data.video_prepare.VideoMedia`."""
        from ..data.prepare import ImageMedia

        return ImageMedia(cfg, self)

    def build_data(self, cfg: TrainConfig, comps: Components, accelerator):
        """List, screen and cache the samples; with the cache built, release the encoders (they are done)."""
        data = super().build_data(cfg, comps, accelerator)
        if cfg.cache_latents:
            self.release_encoders(comps, keep_for_validation=bool(cfg.validation_prompt))
            from diffusers.training_utils import free_memory

            free_memory()
        return data

    def prepare_batch(self, comps: Components, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """Cached batches move to ``device``; raw ones are encoded here, every step (``--cache_latents false``)."""
        if cached:
            return super().prepare_batch(comps, batch, device, cached)
        from ..data.cache import as_encoding

        out = self.encode_prompts(comps, batch["caption"])
        out.update(as_encoding(self.encode_images(comps, batch["pixel_values"].to(device))))
        out["sample_index"] = batch["sample_index"]
        return out

    def release_encoders(self, comps: Components, keep_for_validation: bool) -> None:
        """Drop every encoder after caching; keep the VAE, parked on the CPU, when validation decodes."""
        vae = comps.encoders.get("vae")
        comps.encoders.clear()
        if keep_for_validation and vae is not None:
            comps.encoders["vae"] = vae.to("cpu")

    # ---- samples ----------------------------------------------------------------------------
    def validation_inputs(self, comps: Components, cfg: TrainConfig) -> dict[str, Any]:
        """``--validation_prompt`` encoded with its classifier-free-guidance negative, before the encoders go."""
        return self.encode_prompts(comps, [cfg.validation_prompt], with_negative=True)

    @contextmanager
    def vae_on(self, comps: Components, device: torch.device) -> Iterator[Any]:
        """The VAE on ``device`` for a validation decode, then back where it waits between validations."""
        vae = comps.encoders["vae"]
        home = vae.device
        vae.to(device)
        try:
            yield vae
        finally:
            vae.to(home)

    # ---- memory plan ------------------------------------------------------------------------
    def pixel_batches(self, cfg: TrainConfig) -> list[tuple[str, tuple[int, ...]]]:
        """``[(bucket, shape)]`` of one micro-batch of pixels per bucket: images ``(B, 3, H, W)``; video overrides."""
        r = cfg.resolution
        return [(f"{r} x {r} px", (cfg.train_batch_size, 3, r, r))]

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """The cached conditioning of ``batch_size`` samples (caption embeddings, class labels), as empty tensors."""
        raise NotImplementedError(f"the memory planner does not cover the {self.name} family yet")

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """Each bucket's pixels through the family's own :meth:`encode_images` (the cache step), plus conditioning."""
        from ..data.cache import as_encoding

        out = []
        for bucket, shape in self.pixel_batches(cfg):
            batch = as_encoding(self.encode_images(comps, torch.empty(shape)))
            batch.update(self.plan_conditioning(comps, cfg, shape[0]))
            out.append((bucket, batch))
        return out

