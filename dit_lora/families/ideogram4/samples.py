"""Ideogram 4's validation samples: from the in-memory transformer through the stock ``Ideogram4Pipeline`` (its
schedule, its asymmetric guidance ``g v_cond + (1 - g) v_uncond`` with the unconditional transformer brought to the
device while the samples are drawn, its decode), the validation caption's cached features laid out as its own
``encode_prompt`` lays them; and from the reloaded pipeline with the saved adapter. Both without autocast
(diffusers' README: autocast corrupts Ideogram 4's images) at one constant guidance scale
(``--validation_guidance_scale``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.ideogram4.encoders import LENGTHS_KEY, max_sequence_length
from dit_lora.families.ideogram4.loss import layout_ids
from dit_lora.families.ideogram4.state import Ideogram4Run, run_state
from dit_lora.kit.components import DiffusionSamples, module_on, vae_on
from dit_lora.kit.loader import model_class
from dit_lora.kit.sampling import square_images

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions


def cached_prompt(cond: dict[str, Any]):
    """An ``encode_prompt`` for the in-memory pipeline that returns the cached caption's features in the layout the
    pipeline's own builds (called with ``max_sequence_length`` = the caption's tokens: no padding)."""
    features = cond["prompt_embeds"][:, : int(cond[LENGTHS_KEY][0])]

    def encode_prompt(prompt, grid_h: int, grid_w: int, max_sequence_length: int, device) -> tuple[torch.Tensor, ...]:
        text = features.to(device, torch.float32)
        image = text.new_zeros(text.shape[0], grid_h * grid_w, text.shape[-1])
        return torch.cat([text, image], dim=1), *layout_ids([text.shape[1]], grid_h, grid_w, text.shape[1], device)

    return encode_prompt


#: said at each validation the unconditional transformer finds no room on the device beside the trained one
NO_ROOM = (
    "validation samples skipped: the unconditional transformer Ideogram4Pipeline's guidance runs ({size:.1f} GiB) "
    "does not fit on {device} beside the model being trained ({error}). Training goes on; the final samples come from "
    "the saved adapter in a fresh pipeline after training. To keep samples during training, free memory "
    "(--quantize_base fp8_scaled halves both transformers); to stop trying, set --validation_steps above "
    "--max_train_steps."
)


def gib(module: Any) -> float:
    """``module``'s parameters and buffers in GiB."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**30


class Ideogram4Samples(DiffusionSamples):
    """``FamilySpec.samples``: ``Ideogram4Pipeline`` at ``--resolution`` and the validation guidance scale, with the
    checkpoint's scheduler (the pipeline sets its own logit-normal sigmas on it)."""

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Images from the in-memory transformer and the validation caption's cached features."""
        device = next(model.parameters()).device
        unconditional = Ideogram4Run.required(run_state(comps).unconditional, "unconditional")
        try:
            return self.guided(comps, model, unconditional, cond, cfg.data, cfg.validation, seed, device)
        except torch.OutOfMemoryError as err:  # its weights or the guided passes: the run keeps training
            torch.cuda.empty_cache()
            print(NO_ROOM.format(size=gib(unconditional), device=device, error=str(err).splitlines()[0][:120]))
            return []

    def guided(
        self,
        comps,
        model,
        unconditional,
        cond: dict[str, Any],
        data: DataOptions,
        validation: ValidationOptions,
        seed: int,
        device,
    ) -> list:
        """The stock pipeline's images with both transformers and the VAE on ``device``, back home after (``data``,
        ``validation``: the run's ``cfg.data`` and ``cfg.validation``)."""
        with vae_on(comps, device) as vae, module_on(unconditional, device) as uncond:
            pipe = model_class("diffusers", "Ideogram4Pipeline")(
                scheduler=self.sampler(comps), vae=vae, text_encoder=None, tokenizer=None, transformer=model,
                unconditional_transformer=uncond,
            )  # fmt: skip
            pipe.encode_prompt = cached_prompt(cond)
            pipe.set_progress_bar_config(disable=True)
            text = int(cond[LENGTHS_KEY][0])
            with torch.autocast(device.type, enabled=False):
                return square_images(
                    pipe,
                    data,
                    validation,
                    seed,
                    device,
                    validation.validation_prompt,
                    **self.call_kwargs(validation, text),
                )

    def call_kwargs(self, validation: ValidationOptions, text: int) -> dict[str, Any]:
        """Images per prompt, the constant guidance scale, ``text`` caption tokens (``validation``: the run's
        ``cfg.validation``)."""
        return {
            "num_images_per_prompt": validation.num_validation_images,
            "guidance_scale": validation.validation_guidance_scale,
            "guidance_schedule": None,
            "max_sequence_length": text,
        }

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """Images of ``prompt`` from the reloaded pipeline at the run's validation settings, without autocast."""
        with torch.autocast(pipe.transformer.device.type, enabled=False):
            kwargs = self.prompt_kwargs(cfg.data, cfg.validation, num_images)
            return square_images(pipe, cfg.data, cfg.validation, seed, pipe.transformer.device, prompt, **kwargs)

    def prompt_kwargs(self, data: DataOptions, validation: ValidationOptions, num_images: int) -> dict[str, Any]:
        """Images per prompt, the constant guidance scale and the run's caption length (``data``, ``validation``: the
        run's ``cfg.data`` and ``cfg.validation``)."""
        return {**self.call_kwargs(validation, max_sequence_length(data)), "num_images_per_prompt": num_images}
