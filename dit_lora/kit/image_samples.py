"""The validation images of a text-to-image family whose pipeline draws squares: :class:`SquareImageSamples`.

From the in-memory transformer: the family's pipeline without text encoders (the cached prompt embeddings), the VAE
moved in to decode, the checkpoint's sampler; from the reloaded pipeline: the prompt. Both through
:func:`~.sampling.square_images` (``--resolution`` square, the validation steps, a seeded generator, ``no_grad``).
A family's samples are ``class SanaSamples(SquareImageSamples, DiffusionSamples)``; it states its pipeline class, its
sampler and each call's own arguments.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import vae_on
from dit_lora.kit.sampling import square_images

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions


@contextmanager
def decoding_in_vae_dtype(vae: Any) -> Iterator[None]:
    """While it lasts, ``vae.decode`` casts the latents to the VAE's dtype first: for a pipeline that decodes its
    latents in their own dtype (Lumina2Pipeline's bf16, from the caption embeddings) with the VAE kept in fp32."""
    own = vars(vae).get("decode")  # a decode already set on this instance is given back as it was
    original = vae.decode
    vae.decode = lambda latents, *args, **kwargs: original(latents.to(vae.dtype), *args, **kwargs)
    try:
        yield
    finally:
        if own is None:
            del vae.decode
        else:
            vae.decode = own


class SquareImageSamples(ABC):
    """``FamilySpec.samples``: the family's pipeline at ``--resolution`` (PNG files), a mixin before the kit's
    :class:`~dit_lora.kit.components.DiffusionSamples` (which holds the encoders and writes the PNG files)."""

    #: the diffusers pipeline class name, e.g. ``"SanaPipeline"``
    pipeline: str = ""
    #: cast the latents to the VAE's dtype before decoding (:func:`decoding_in_vae_dtype`): for a pipeline that decodes
    #: them in their own dtype beside an fp32 VAE
    cast_latents_for_vae: bool = False

    def pipeline_class(self) -> Any:
        """The class :attr:`pipeline` names (imported on use: diffusers' pipelines import slowly)."""
        import diffusers

        return getattr(diffusers, self.pipeline)

    @abstractmethod
    def sampler(self, comps: Components) -> Any:
        """The in-memory pipeline's scheduler (the checkpoint's own sampler)."""

    @abstractmethod
    def cached_kwargs(
        self, cond: dict[str, Any], device: torch.device, data: DataOptions, validation: ValidationOptions
    ) -> dict[str, Any]:
        """The in-memory call's arguments: the cached embeddings ``cond`` (for ``--num_validation_images``
        images), guidance and the rest (``data``, ``validation``: the run's ``cfg.data`` and ``cfg.validation``)."""

    @abstractmethod
    def prompt_kwargs(self, cfg: TrainConfig, num_images: int) -> dict[str, Any]:
        """The reloaded pipeline's arguments besides the prompt (``num_images`` images of it)."""

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Images from the in-memory transformer and the validation prompt's embeddings (VAE moved in to decode)."""
        device = next(model.parameters()).device
        with vae_on(comps, device) as vae:
            pipe = self.pipeline_class()(
                tokenizer=None, text_encoder=None, vae=vae, transformer=model, scheduler=self.sampler(comps)
            )
            pipe.set_progress_bar_config(disable=True)
            with self.decoding(pipe):
                kwargs = self.cached_kwargs(cond, device, cfg.data, cfg.validation)
                return square_images(pipe, cfg.data, cfg.validation, seed, device, **kwargs)

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """Images of ``prompt`` from the reloaded pipeline at the run's validation settings."""
        with self.decoding(pipe):
            return square_images(
                pipe,
                cfg.data,
                cfg.validation,
                seed,
                pipe.transformer.device,
                prompt,
                **self.prompt_kwargs(cfg, num_images),
            )

    def decoding(self, pipe: Any) -> Any:
        """:func:`decoding_in_vae_dtype` of the pipeline's VAE where :attr:`cast_latents_for_vae` says so, else nothing."""
        return decoding_in_vae_dtype(pipe.vae) if self.cast_latents_for_vae else nullcontext()
