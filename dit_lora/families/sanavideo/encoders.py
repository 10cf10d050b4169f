"""SANA-Video's encoders: clips through the Wan VAE (fp32, the posterior mode normalised as the pipelines normalise
it) and captions through the pipeline's own ``encode_prompt`` (Gemma-2, 300 tokens, the complex human instruction);
what changes the cache; and the run's setup (text settings; image-to-video's conditioning image)."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionEncoders
from dit_lora.families.diffusion.conditioning import kept_conditioning_image, refuse_stills
from dit_lora.families.diffusion.latents import normalised_clip_latents
from dit_lora.families.diffusion.prompts import MASKED, instruction, pipeline_prompts
from dit_lora.families.diffusion.text_conditioned import TextSettingsSetup, encoder_identity
from dit_lora.families.sanavideo.info import SanaVideoTask
from dit_lora.families.sanavideo.state import required, run_state

#: the pipelines' ``max_sequence_length`` default (NVlabs' ``text_encoder.model_max_length``)
TEXT_LEN = 300


def default_instruction() -> tuple[str, ...]:
    """The complex human instruction ``SanaVideoPipeline`` prefixes at inference (read from the installed pipeline;
    the image-to-video pipeline's default is the same list)."""
    from diffusers import SanaVideoPipeline

    return tuple(inspect.signature(SanaVideoPipeline.__call__).parameters["complex_human_instruction"].default)


class SanaVideoEncoders(DiffusionEncoders):
    """``FamilySpec.encoders``: normalised Wan-VAE latents of the clip and Gemma-2 embeddings."""

    def __init__(self, task: SanaVideoTask) -> None:
        self.task = task

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """300 tokens and, with ``--complex_human_instruction``, the pipeline's instruction prefix."""
        instruction = default_instruction() if cfg.family_options.complex_human_instruction else None
        return TextSettings(max_sequence_length=TEXT_LEN, instruction=instruction)

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model and its stamp, the text dtype and settings, and what the cached latents hold."""
        return encoder_identity(
            cfg,
            "sanavideo",  # both tasks cache the same latents and embeddings
            stamp_key="model_stamp",
            complex_human_instruction=cfg.family_options.complex_human_instruction,
            max_sequence_length=TEXT_LEN,
            latents="posterior_mode_normalised_fp32",
        )

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(B, F, 3, H, W)`` in [-1, 1] -> ``{"latents": (B, 16, F', h, w)}``: the posterior mode (the pipelines'
        ``sample_mode="argmax"``), ``(z - latents_mean) / latents_std`` as ``prepare_latents`` normalises."""
        state = run_state(comps)
        mean, std = required(state.latents_mean, "latents_mean"), required(state.latents_std, "latents_std")
        return normalised_clip_latents(comps.encoders["vae"], pixel_values, mean, std)

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through ``SanaVideoPipeline.encode_prompt`` at the run's text settings: the pipeline's own
        prefix, truncation and token selection, so training prompts are what it feeds the transformer."""
        return pipeline_prompts(
            comps,
            "SanaVideoPipeline",
            captions,
            with_negative=with_negative,
            keys=MASKED,
            max_sequence_length=TEXT_LEN,
            complex_human_instruction=instruction(run_state(comps).text),
        )


class SanaVideoSetup(TextSettingsSetup):
    """``FamilySpec.setup``: the text settings recorded once the components load; image-to-video keeps its
    conditioning image and refuses still images."""

    run_state = staticmethod(run_state)

    def __init__(self, task: SanaVideoTask, encoders: SanaVideoEncoders) -> None:
        super().__init__(encoders)
        self.task = task

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Image-to-video: refuse images (a one-frame clip has no frame after the conditioning one to learn) and
        keep the first clip's first frame (or ``--validation_image``) for validation videos."""
        if self.task.task != "i2v":
            return
        refuse_stills(samples, "--family sanavideo (text-to-video)")
        kept_conditioning_image(self.task, cfg, run_state(comps), samples)
