"""Qwen-Image-Edit (``QwenImageEditPipeline``: Qwen-Image-Edit) and Edit-Plus (``QwenImageEditPlusPipeline``:
Edit-2509, Edit-2511): the control images in the prompt, in the latent sequence, and in validation.

As the pipelines condition (diffusers ``pipeline_qwenimage_edit.py``, ``pipeline_qwenimage_edit_plus.py``):

- the caption is encoded by Qwen2.5-VL *with* the control images, by the pipeline's own ``encode_prompt`` (its edit
  template, drop index 64; Edit-Plus prefixes "Picture N:" per image). Edit shows the text encoder the image the VAE
  sees; Edit-Plus each image at a 384 x 384 area (``CONDITION_IMAGE_SIZE``, its aspect kept, sides in 32s). In
  training the control images are the sample's bucket size (``edit_data.py``), one sample per encode call (Edit-Plus
  numbers the pictures of the whole call), padded to the text length plus the images' tokens (equal within a bucket);
- the control latents (the VAE's normalised posterior mode, as ``_encode_vae_image``'s ``argmax``) are packed and
  appended to the noisy target's tokens, ``img_shapes`` gets one grid per image, the prediction is cut to the
  target's tokens (the loss, :class:`EditLoss`). Edit-2511's ``zero_cond_t`` (the control tokens modulated at t = 0)
  is the transformer's own, from ``img_shapes``.

Caption dropout, ``--random_flip`` and ``--cache_latents false`` are refused (``model.py``, the kit's
``refuse_edit_options``): the empty caption would be encoded without its images, a flipped target would face an
unflipped control, and the uncached path encodes captions alone.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import torch
from PIL import Image

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.qwenimage.encoders import NEGATIVE_PROMPT, QwenImageEncoders, pad_text
from dit_lora.families.qwenimage.loss import QwenImageLoss, pack_latents
from dit_lora.families.qwenimage.samples import QwenImageSamples
from dit_lora.families.qwenimage.state import run_state
from dit_lora.kit.edit_data import ControlSetup, control_pixels, to_pil

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions

#: QwenImageEditPlusPipeline's CONDITION_IMAGE_SIZE: the area of each image the text encoder sees
CONDITION_AREA = 384 * 384
#: both Edit pipelines' VAE image area at inference (Edit: also what its text encoder sees)
VAE_AREA = 1024 * 1024


def area_size(area: int, width: int, height: int) -> tuple[int, int]:
    """``(width, height)`` of ``area`` pixels at the aspect ``width / height``, sides rounded to 32 (the pipelines'
    ``calculate_dimensions``)."""
    ratio = width / height
    new_width = math.sqrt(area * ratio)
    return round(new_width / 32) * 32, round(new_width / ratio / 32) * 32


def edit_pipeline(comps: Components, plus: bool, **parts: Any) -> Any:
    """An Edit (``plus``: Edit-Plus) pipeline of the run's text encoder, tokenizer and processor (and ``parts``)."""
    from diffusers import QwenImageEditPipeline, QwenImageEditPlusPipeline  # slow import: only when encoding

    cls = QwenImageEditPlusPipeline if plus else QwenImageEditPipeline
    kwargs = {"scheduler": None, "vae": None, "transformer": None, "text_encoder": None, "tokenizer": None}
    kwargs.update(processor=comps.encoders.get("processor"), **parts)
    if "text_encoder" not in parts:
        kwargs.update(text_encoder=comps.encoders.get("text_encoder"), tokenizer=comps.encoders.get("tokenizer"))
    return cls(**kwargs)


class EditEncoders(QwenImageEncoders):
    """``FamilySpec.encoders``: the target's latents, and per sample the control latents and the caption encoded with
    its control images (``encode_samples``, which the cache calls instead of ``encode_prompts``)."""

    def __init__(self, plus: bool) -> None:
        self.plus = plus

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """Text-to-image's, plus the pipeline whose prompt the embeddings follow."""
        return {**super().cache_identity(cfg, comps), "edit": "edit_plus" if self.plus else "edit"}

    def vl_images(self, images: list[Image.Image]) -> list[Image.Image]:
        """What the text encoder sees of the controls: Edit the images themselves, Edit-Plus each at 384 x 384."""
        if not self.plus:
            return images
        return [im.resize(area_size(CONDITION_AREA, *im.size), Image.Resampling.LANCZOS) for im in images]

    def image_tokens(self, comps: Components, images: list[Image.Image]) -> int:
        """How many ``<|image_pad|>`` tokens the processor gives ``images`` (the text length grows by them)."""
        processor = comps.encoders["processor"].image_processor
        grid = processor(images=images, return_tensors="pt")["image_grid_thw"]
        return int(grid.prod(dim=1).sum()) // int(processor.merge_size) ** 2

    def encode_edit_prompt(self, comps: Components, caption: str, images: list[Image.Image]) -> dict[str, torch.Tensor]:
        """One caption with its control images through the pipeline's ``encode_prompt``, padded to the text length plus
        the images' tokens (a longer caption is cut there, as the text-to-image pipeline cuts at its length)."""
        text = run_state(comps).text
        length = (text.max_sequence_length if text else 512) + self.image_tokens(comps, self.vl_images(images))
        pipe = edit_pipeline(comps, self.plus)
        shown = self.vl_images(images)
        with torch.no_grad():
            embeds, mask = pipe.encode_prompt(
                [caption], image=shown if self.plus else shown[0], device=comps.encoders["text_encoder"].device
            )
        return pad_text(embeds[:, :length], None if mask is None else mask[:, :length], length)

    def encode_samples(self, comps: Components, samples: list) -> dict[str, torch.Tensor]:
        """Per sample: its controls resized and cropped to its bucket as its target is, their latents
        (``control_latents``, ``(N, C, h, w)``), and its caption encoded with them; stacked over ``samples``."""
        rows: list[dict[str, torch.Tensor]] = []
        for sample in samples:
            pixels = [control_pixels(sample, path, run_state(comps).crop) for path in sample.conditions]
            row = self.encode_edit_prompt(comps, sample.caption, [to_pil(p) for p in pixels])
            row["control_latents"] = self.encode_images(comps, torch.stack(pixels))[None]
            rows.append(row)
        return {k: torch.cat([r[k] for r in rows]) for k in rows[0]}


class EditLoss(QwenImageLoss):
    """``FamilySpec.loss``: text-to-image's, the packed control latents appended to the noisy target's tokens."""

    def image_tokens(self, batch: dict[str, Any], packed: torch.Tensor) -> tuple[torch.Tensor, list]:
        """The noisy target's tokens, then each control image's (``control_latents``: ``(B, N, C, h, w)``); one RoPE
        grid per image, as the Edit pipelines' ``img_shapes``."""
        controls = batch["control_latents"].to(packed.dtype)
        height, width = batch["latents"].shape[-2:]
        shapes = [(1, height // 2, width // 2)]
        parts = [packed]
        for index in range(controls.shape[1]):
            parts.append(pack_latents(controls[:, index]))
            shapes.append((1, controls.shape[-2] // 2, controls.shape[-1] // 2))
        return torch.cat(parts, dim=1), [shapes] * packed.shape[0]


class EditSetup(ControlSetup):
    """``FamilySpec.setup``: the kit's edit setup (text-to-image's text settings, the crop the controls follow); the
    validation control images and their prompt embeddings, computed while the text encoder is loaded."""

    run_state = staticmethod(run_state)

    def keep_validation_controls(
        self, comps: Components, data: DataOptions, validation: ValidationOptions, paths: list[str]
    ) -> None:
        """Keep the validation controls (``--validation_image``, else the first sample's) and their embeddings."""
        state = run_state(comps)
        try:
            images = [Image.open(p).convert("RGB") for p in paths]
        except OSError as err:
            raise UserError(f"--validation_image `{paths[0]}` cannot be read as an image ({err}).") from None
        if not images:
            raise UserError("Qwen-Image-Edit validation needs a control image: set --validation_image.")
        state.validation_controls = images
        encoders = self.encoders
        assert isinstance(encoders, EditEncoders)
        shown = validation_vl_images(images, encoders.plus)
        pipe = edit_pipeline(comps, encoders.plus)
        device = comps.encoders["text_encoder"].device

        def encoded(text: str, prefix: str) -> dict[str, torch.Tensor]:
            embeds, mask = pipe.encode_prompt([text], image=shown if encoders.plus else shown[0], device=device)
            mask = mask if mask is not None else torch.ones(embeds.shape[:2])
            return {f"{prefix}prompt_embeds": embeds.cpu(), f"{prefix}prompt_embeds_mask": mask.cpu()}

        with torch.no_grad():
            negative = encoded(NEGATIVE_PROMPT, "negative_")
            state.validation_embeds = {p: {**encoded(p, ""), **negative} for p in validation.prompts}


def validation_vl_images(images: list[Image.Image], plus: bool) -> list[Image.Image]:
    """The control images as the pipeline shows them to the text encoder at inference (Edit: at a 1024 x 1024 area,
    Edit-Plus: at 384 x 384), so the cached validation embeddings are the pipeline's."""
    area = CONDITION_AREA if plus else VAE_AREA
    return [im.resize(area_size(area, *im.size), Image.Resampling.LANCZOS) for im in images]


class EditSamples(QwenImageSamples):
    """``FamilySpec.samples``: the Edit pipeline on the run's validation control images."""

    def __init__(self, encoders: EditEncoders) -> None:
        super().__init__(encoders)
        self.plus = encoders.plus

    def validation_inputs(self, comps: Components, validation) -> dict[str, Any]:
        """Nothing yet: the embeddings need the control images, known once the samples are (``EditSetup``)."""
        return {}

    def images(self, comps: Components | None) -> Any:
        """The control image(s) for the pipeline call."""
        controls = run_state(comps).validation_controls if comps is not None else None
        if not controls:
            raise UserError("Qwen-Image-Edit validation needs a control image: set --validation_image.")
        return list(controls) if self.plus else controls[0]

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Images from the in-memory transformer, the cached control-conditioned embeddings."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        state = run_state(comps)
        device = next(model.parameters()).device
        scheduler = FlowMatchEulerDiscreteScheduler.from_config(state.scheduler_config)
        prompt = cast(str, cfg.validation.validation_prompt)  # the one prompt of this call (the loop's _generate)
        embeds = {k: v.to(device) for k, v in (state.validation_embeds or {}).get(prompt, {}).items()}
        vae = comps.encoders["vae"]
        home, home_dtype = vae.device, vae.dtype
        # the pipeline encodes the control images in the prompt's dtype (the transformer's): the VAE follows for the call
        vae.to(device, dtype=next(model.parameters()).dtype)
        try:
            pipe = edit_pipeline(comps, self.plus, vae=vae, transformer=model, scheduler=scheduler, text_encoder=None)
            pipe.set_progress_bar_config(disable=True)
            with torch.no_grad():
                return pipe(
                    image=self.images(comps),
                    true_cfg_scale=cfg.validation.validation_guidance_scale,
                    num_images_per_prompt=cfg.validation.num_validation_images,
                    height=cfg.data.resolution,
                    width=cfg.data.resolution,
                    num_inference_steps=cfg.validation.validation_inference_steps,
                    generator=torch.Generator(device=device).manual_seed(seed),
                    **embeds,
                ).images
        finally:
            vae.to(home, dtype=home_dtype)

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """Images from the reloaded Edit pipeline on the same control images."""
        with torch.no_grad():
            return pipe(
                image=self.images(comps),
                prompt=prompt,
                negative_prompt=NEGATIVE_PROMPT,
                true_cfg_scale=cfg.validation.validation_guidance_scale,
                num_images_per_prompt=num_images,
                height=cfg.data.resolution,
                width=cfg.data.resolution,
                num_inference_steps=cfg.validation.validation_inference_steps,
                generator=torch.Generator(device=pipe.transformer.device).manual_seed(seed),
            ).images
