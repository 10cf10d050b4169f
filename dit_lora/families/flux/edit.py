"""FLUX.1 Kontext [dev] (``FluxKontextPipeline``, ``--family flux_kontext``): FLUX.1 with the image to edit in the
sequence. What differs from FLUX.1 [dev], as the pipeline conditions (diffusers ``pipeline_flux_kontext.py``) and
diffusers' ``train_dreambooth_lora_flux_kontext.py`` trains:

- each sample is a target image, its caption (the edit instruction) and one control image (the image to edit), read
  by the kit's edit data (:mod:`~dit_lora.kit.edit_data`: the metadata columns of the trainers people
  come from, ``--cond_image_column``, ``--cond_image_dir``), cover-resized and cropped to the target's bucket;
- the control latents (the VAE's shifted and scaled posterior mode, as ``_encode_vae_image``'s ``argmax``) are cached
  beside the target's; the step appends them, packed, to the noisy target's tokens with ids ``(1, h, w)``, and keeps
  the prediction of the target's tokens (:class:`KontextLoss`); the shift is read at the target's token count, as the
  pipeline reads it;
- the caption is encoded as FLUX.1's (no image in the text encoders), so caption dropout trains as for FLUX.1;
  ``--random_flip`` and ``--cache_latents false`` are refused (the kit's ``refuse_edit_options``).

Validation samples edit ``--validation_image`` (else the first sample's control image), fitted to ``--resolution``
square, through ``FluxKontextPipeline`` with its ``max_area`` the run's size and no snap to its preferred
resolutions (``_auto_resize=False``), so the in-memory and the reloaded pipelines see the control image the training
did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.flux.encoders import FluxEncoders
from dit_lora.families.flux.loss import FluxLoss
from dit_lora.families.flux.model import FluxModel
from dit_lora.families.flux.plan import FluxPlan
from dit_lora.families.flux.samples import FluxSamples
from dit_lora.families.flux.state import FluxRun, run_state
from dit_lora.kit.components import DiffusionData, vae_on
from dit_lora.kit.conditioning import check_validation_image
from dit_lora.kit.edit_data import (
    ControlFlags,
    ControlSetup,
    EditMedia,
    control_pixels,
    fitted_control,
    refuse_edit_options,
    to_pil,
)
from dit_lora.kit.packed import latent_ids, pack

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions

PIPELINE = "FluxKontextPipeline"
#: how Kontext names its edit data: diffusers' --cond_image_column, and a folder as musubi-tuner's control_directory
FLAGS = ControlFlags("cond_image_column", "cond_image_dir", "FLUX.1 Kontext")


class KontextModel(FluxModel):
    """``FamilySpec.model``: FLUX.1's checks and loading, the options an edit run cannot take, a readable
    ``--validation_image`` (a FluxPipeline folder under ``--family flux_kontext`` is the registry's refusal,
    ``setup/family_inference.check_task_matches``)."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """FLUX.1's checks, then Kontext's own."""
        super().validate_config(cfg)
        refuse_edit_options(cfg, "FLUX.1 Kontext")
        check_validation_image(cfg, "edit the first training sample's control image")
        if cfg.family_options.validation_image:  # before the 12B model loads, not at the first validation
            fitted_control(cfg.family_options.validation_image, cfg.data.resolution)


class KontextData(DiffusionData):
    """``FamilySpec.data``: every sample with its control image (the kit's ``EditMedia``, one control per sample)."""

    def data_handler(self, cfg: TrainConfig, spec):
        """The edit image handler."""
        return EditMedia(cfg, spec, single=True, flags=FLAGS)


class KontextEncoders(FluxEncoders):
    """``FamilySpec.encoders``: FLUX.1's, plus each sample's control latents (``encode_samples``, which the cache calls
    instead of ``encode_prompts``)."""

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """FLUX.1's, plus how the control images are prepared."""
        return {**super().cache_identity(cfg, comps), "edit": "kontext"}

    def encode_samples(self, comps: Components, samples: list) -> dict[str, torch.Tensor]:
        """The captions as FLUX.1 encodes them, and ``control_latents`` ``(B, C, h, w)``: each sample's control image
        prepared as its target (bucket, crop) through the VAE."""
        crop = run_state(comps).crop
        pixels = torch.stack([control_pixels(s, s.conditions[0], crop) for s in samples])
        out = self.encode_prompts(comps, [s.caption for s in samples])
        out["control_latents"] = cast(torch.Tensor, self.encode_images(comps, pixels))  # an image VAE's: a tensor
        return out


class KontextLoss(FluxLoss):
    """``FamilySpec.loss``: FLUX.1's, the packed control latents appended with ids ``(1, h, w)``."""

    def image_sequence(
        self, noisy: torch.Tensor, batch: dict[str, Any], dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The noisy target's tokens then the control's; the target's ids then the control's."""
        tokens, ids = super().image_sequence(noisy, batch, dtype)
        control = batch["control_latents"].to(noisy.dtype)
        height, width = control.shape[-2:]
        control_ids = latent_ids(height // 2, width // 2, noisy.device, dtype, index=1)
        return torch.cat([tokens, pack(control)], dim=1), torch.cat([ids, control_ids])


class KontextSetup(ControlSetup):
    """``FamilySpec.setup``: the kit's edit setup (FLUX.1's text settings, the crop the controls follow) and the
    validation control image."""

    def keep_validation_controls(
        self, comps: Components, data: DataOptions, validation: ValidationOptions, paths: list[str]
    ) -> None:
        """Keep the validation control image (``--validation_image``, else the first sample's) at the run's size."""
        if not paths:
            raise UserError("FLUX.1 Kontext validation needs an image to edit: set --validation_image.")
        run_state(comps).validation_control = fitted_control(paths[0], data.resolution)


class KontextPlan(FluxPlan):
    """``FamilySpec.plan``: FLUX.1's, each batch with a control latent like its target's."""

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """FLUX.1's batches, a control latent of the target's shape in each."""
        batches = super().plan_batches(cfg, comps)
        for _, batch in batches:
            batch["control_latents"] = torch.empty_like(batch["latents"])
        return batches


class KontextSamples(FluxSamples):
    """``FamilySpec.samples``: ``FluxKontextPipeline`` editing the run's validation control image."""

    pipeline = PIPELINE

    def call_kwargs(self, comps: Components | None, data: DataOptions) -> dict[str, Any]:
        """The control image at the run's size, kept there (``max_area``, no snap to the preferred resolutions)."""
        size = data.resolution
        return {"image": to_pil(self.control(comps)), "max_area": size * size, "_auto_resize": False}

    def control(self, comps: Components | None) -> torch.Tensor:
        """The run's validation control pixels, ``(3, H, W)`` (:class:`KontextSetup` keeps them)."""
        state: FluxRun | None = comps.state if comps is not None else None
        if state is None or state.validation_control is None:
            raise UserError("FLUX.1 Kontext validation needs an image to edit: set --validation_image.")
        return state.validation_control

    def in_memory_kwargs(self, comps: Components, model: torch.nn.Module, data: DataOptions) -> dict[str, Any]:
        """The control latents as the training encodes them (the run's fp32 VAE; the pipeline would encode the image
        in the transformer's dtype), kept at the run's size."""
        parameter = next(model.parameters())
        with vae_on(comps, parameter.device):
            pixels = self.control(comps)[None].to(parameter.device)
            latents = cast(torch.Tensor, self.encoders.encode_images(comps, pixels))
        size = data.resolution
        return {"image": latents.to(parameter.dtype), "max_area": size * size, "_auto_resize": False}
