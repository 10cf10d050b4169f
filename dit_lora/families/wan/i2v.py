"""Wan image-to-video (``wan_i2v``, ``WanImageToVideoPipeline``): what differs from text-to-video (:mod:`.spec`):
the components below subclass text-to-video's.

Wan 2.1 I2V 14B (480P, 720P) and Wan 2.2 I2V-A14B: the transformer takes ``[noisy latents | mask | image
condition]`` on the channel axis (16 + 4 + 16 = 36). The condition is what ``WanImageToVideoPipeline.prepare_latents``
builds at inference: the first frame followed by black frames through the VAE, normalised, with the 4-channel
first-frame mask in front; this family computes it with that very method at caching time (so training and
inference conditions agree by construction). Wan 2.1 also feeds the CLIP ViT-H image embedding (the
penultimate hidden state, ``WanImageToVideoPipeline.encode_image``) to the cross-attention's image keys; it is
cached too. Wan 2.2 TI2V-5B in image mode needs no extra cache: its condition is the clip's own first latent
frame (the Wan VAE is causal in time: the first latent frame depends on the first frame only; tested).
"""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.families.wan.adapter import WanAdapter, WanCard
from dit_lora.families.wan.encoders import WanEncoders
from dit_lora.families.wan.experts import transformer_config
from dit_lora.families.wan.info import WanTask
from dit_lora.families.wan.loss import WanLoss
from dit_lora.families.wan.model import WanModel
from dit_lora.families.wan.plan import WanPlan
from dit_lora.families.wan.samples import WanSamples
from dit_lora.families.wan.state import run_state
from dit_lora.kit.adapter import first_frame_image
from dit_lora.kit.components import DiffusionSetup
from dit_lora.kit.conditioning import (
    check_validation_image,
    kept_conditioning_image,
    refuse_stills,
    to_pil,
)
from dit_lora.kit.loader import image_encoder_parts


def i2v_pipeline(comps: Components, expand: bool):
    """A ``WanImageToVideoPipeline`` of the VAE (and 2.1's CLIP) only: its ``prepare_latents`` and ``encode_image``
    build the conditions exactly as at inference."""
    from diffusers import WanImageToVideoPipeline

    return WanImageToVideoPipeline(
        tokenizer=None,
        text_encoder=None,
        vae=comps.encoders["vae"],
        scheduler=None,
        image_processor=comps.encoders.get("image_processor"),
        image_encoder=comps.encoders.get("image_encoder"),
        transformer=None,
        transformer_2=None,
        expand_timesteps=expand,
    )


def conditioning_image(task: WanTask, cfg: TrainConfig, comps: Components | None, samples: list | None = None):
    """The run's conditioning image (kept in its :class:`~dit_lora.families.wan.state.WanRun` by
    :meth:`WanI2VSetup.inspect_samples`), else ``--validation_image``."""
    return kept_conditioning_image(task, cfg, run_state(comps) if comps is not None else None, samples)


class WanI2VModel(WanModel):
    """``FamilySpec.model``: text-to-video's checks plus ``--validation_image``; 2.1 I2V also loads CLIP."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """Text-to-video's checks, then a given ``--validation_image`` must be a file."""
        super().validate_config(cfg)
        check_validation_image(cfg, "condition validation videos on the first training clip's first frame")

    def image_encoders(self, cfg: TrainConfig, common: dict) -> dict[str, Any]:
        """Wan 2.1 I2V: the CLIP vision model (fp32, as diffusers' Wan docs load it) and its processor."""
        if not self.task.info(cfg.model).image_encoder:
            return {}
        return image_encoder_parts(cfg, common, "CLIPVisionModel", "CLIPImageProcessor", "image_processor")


class WanI2VEncoders(WanEncoders):
    """``FamilySpec.encoders``: the latents plus the pipeline's own image condition (and 2.1's CLIP embedding)."""

    def cached_conditions(self, cfg: TrainConfig) -> str:
        """The pipeline condition and (2.1) the CLIP embedding; nothing for TI2V-5B."""
        info = self.task.info(cfg.model)
        if info.kind == "ti2v":
            return ""
        return "+pipeline_condition" + ("+clip_penultimate" if info.image_encoder else "")

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """Adds ``"condition"`` (mask + image latents, ``(B, 4 + C, F', h, w)``) and, with a CLIP encoder,
        ``"image_embeds"``, both as ``WanImageToVideoPipeline`` computes them (TI2V: nothing added)."""
        out = super().encode_images(comps, pixel_values)
        if run_state(comps).expand_timesteps:
            return out
        pipe = i2v_pipeline(comps, expand=False)
        bsz, frames, _, height, width = pixel_values.shape
        vae = comps.encoders["vae"]
        first = pixel_values[:, 0].to(vae.device, torch.float32)  # the pipeline's preprocessed image: [-1, 1]
        conditions = []
        with torch.no_grad():
            for i in range(bsz):  # prepare_latents encodes one image per call
                zeros = torch.zeros_like(out["latents"][i : i + 1])  # given latents: no random draw
                _, condition = pipe.prepare_latents(
                    first[i : i + 1],
                    1,
                    out["latents"].shape[1],
                    height,
                    width,
                    frames,
                    torch.float32,
                    vae.device,
                    None,
                    latents=zeros,
                )
                conditions.append(condition)
            out["condition"] = torch.cat(conditions).float()
            if "image_encoder" in comps.encoders:
                out["image_embeds"] = pipe.encode_image(to_pil(first), vae.device).float()
        return out


class WanI2VLoss(WanLoss):
    """``FamilySpec.loss``: text-to-video's, the image condition beside the noisy latents."""

    def conditioning(
        self, comps: Components, batch: dict[str, Any], inputs: dict[str, Any], generator: torch.Generator
    ) -> dict[str, Any]:
        """``[noisy | mask + image latents]`` on the channel axis and the CLIP image embedding (2.1)."""
        if "condition" not in batch:  # TI2V: the first latent frame is in the hidden states already
            return inputs
        hidden = torch.cat([inputs["hidden_states"], batch["condition"].to(inputs["hidden_states"].dtype)], dim=1)
        out = {**inputs, "hidden_states": hidden}
        if "image_embeds" in batch:
            out["encoder_hidden_states_image"] = batch["image_embeds"]
        return out


class WanI2VPlan(WanPlan):
    """``FamilySpec.plan``: text-to-video's, plus the condition (and CLIP embedding) in every planned batch."""

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """The planned components, plus the CLIP token count of 2.1 I2V ((image_size / patch)^2 + class token)."""
        comps = super().plan_components(cfg, read, depth)
        clip = read("image_encoder", "config.json") if self.task.info(cfg.model).image_encoder else None
        if clip:
            vision = clip.get("vision_config", clip)
            run_state(comps).clip_tokens = (int(vision["image_size"]) // int(vision["patch_size"])) ** 2 + 1
        return comps

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """The planner's batches: the latents plus the condition (and CLIP embedding) shapes, as empty tensors."""
        out = []
        info = self.task.info(cfg.model)
        for bucket, batch in super().plan_batches(cfg, comps):
            latents = batch["latents"]
            if info.kind != "ti2v":
                b, c, f, h, w = latents.shape
                batch["condition"] = torch.empty(b, c + 4, f, h, w, dtype=latents.dtype)
                if info.image_encoder:
                    batch["image_embeds"] = torch.empty(
                        b,
                        run_state(comps).clip_tokens or 257,
                        transformer_config(comps.model).image_dim,
                        dtype=latents.dtype,
                    )
            out.append((bucket, batch))
        return out


class WanI2VSetup(DiffusionSetup):
    """``FamilySpec.setup``: images refused, the validation image (and 2.1's CLIP embedding of it) kept."""

    def __init__(self, task: WanTask) -> None:
        self.task = task

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Refuse images (one-frame clips: nothing after the conditioning frame to learn), then keep the
        conditioning image of validation videos in the run's ``validation_image``."""
        refuse_stills(samples, "--family wan (text-to-video), where images teach appearance")
        image = conditioning_image(self.task, cfg, comps, samples)
        if (
            cfg.validation.validation_prompt and "image_encoder" in comps.encoders
        ):  # 2.1: its CLIP embedding, while loaded
            pipe = i2v_pipeline(comps, expand=False)
            with torch.no_grad():
                run_state(comps).validation_image_embeds = pipe.encode_image(
                    image, comps.encoders["image_encoder"].device
                )


class WanI2VSamples(WanSamples):
    """``FamilySpec.samples``: text-to-video's, animating the run's conditioning image."""

    def image_call_kwargs(self, comps: Components | None, cond: dict | None, cfg: TrainConfig, n: int) -> dict:
        """The conditioning image (:func:`conditioning_image`)."""
        return {"image": conditioning_image(self.task, cfg, comps)}

    def fit_validation_pipeline(self, pipe, comps: Components) -> None:
        """Wan 2.1: the image encoder left with the cache, so the pipeline's ``encode_image`` returns the embedding
        :meth:`WanI2VSetup.inspect_samples` computed from the same image. (Passing ``image_embeds`` is not an
        option: the pipeline refuses it together with ``image``, which ``prepare_latents`` needs.)"""
        embeds = run_state(comps).validation_image_embeds
        if embeds is not None:
            pipe.encode_image = lambda image, device: embeds.to(device)


class WanI2VAdapter(WanAdapter):
    """``FamilySpec.adapter``: text-to-video's; 2.1 I2V's CLIP reloads in fp32."""

    def fp32_parts(self, cfg: TrainConfig, common: dict) -> dict[str, Any]:
        """The CLIP image encoder in fp32 (2.1 I2V; none for the others)."""
        if not self.task.info(cfg.model).image_encoder:
            return {}
        from transformers import CLIPVisionModel

        return {
            "image_encoder": CLIPVisionModel.from_pretrained(
                cfg.model.pretrained_model_name_or_path,
                subfolder="image_encoder",
                **dtype_kwarg("transformers", torch.float32),
                **common,
            )
        }


class WanI2VCard(WanCard):
    """``FamilySpec.card``: text-to-video's, the snippet loading the first frame to animate."""

    def snippet_image(self) -> tuple[str, str, str]:
        """(extra import, lines before the call, argument) for the usage snippet's conditioning image: the kit's
        first frame."""
        return first_frame_image()
