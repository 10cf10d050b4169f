"""SANA-Video's encoders: clips through the Wan VAE (fp32, the posterior mode normalised as the pipelines normalise
it) and captions through the pipeline's own ``encode_prompt`` (Gemma-2, ``--max_sequence_length`` tokens, 300 when
unset, the complex human instruction); what changes the cache; and the run's setup (text settings; image-to-video's
conditioning image)."""

from __future__ import annotations

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.sanavideo.info import SanaVideoTask
from dit_lora.families.sanavideo.state import required, run_state
from dit_lora.kit.latents import normalised_clip_latents
from dit_lora.kit.prompts import CaptionLength
from dit_lora.kit.text_conditioned import ClipSetup, InstructedCaptions

#: the pipelines' ``max_sequence_length`` default (NVlabs' ``text_encoder.model_max_length``)
TEXT_LEN = 300
#: ``--max_sequence_length``, else the pipelines' default (both take it: ``encode_prompt(max_sequence_length=...)``)
max_sequence_length = CaptionLength(TEXT_LEN)


class SanaVideoEncoders(InstructedCaptions):
    """``FamilySpec.encoders``: normalised Wan-VAE latents of the clip and Gemma-2 embeddings of
    ``--max_sequence_length`` tokens (300 unset), through ``SanaVideoPipeline.encode_prompt`` with its instruction
    (the kit's :class:`InstructedCaptions`; the image-to-video pipeline's default instruction is the same list)."""

    pipeline, default_length = "SanaVideoPipeline", TEXT_LEN
    # both tasks cache the same latents and embeddings
    identity_family, stamp_key = "sanavideo", "model_stamp"
    identity_extra = (("latents", "posterior_mode_normalised_fp32"),)

    def __init__(self, task: SanaVideoTask) -> None:
        self.task = task

    def text_length(self, cfg: TrainConfig) -> int:
        """:data:`max_sequence_length`."""
        return max_sequence_length(cfg.data)

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(B, F, 3, H, W)`` in [-1, 1] -> ``{"latents": (B, 16, F', h, w)}``: the posterior mode (the pipelines'
        ``sample_mode="argmax"``), ``(z - latents_mean) / latents_std`` as ``prepare_latents`` normalises."""
        state = run_state(comps)
        mean, std = required(state.latents_mean, "latents_mean"), required(state.latents_std, "latents_std")
        return normalised_clip_latents(comps.encoders["vae"], pixel_values, mean, std)


class SanaVideoSetup(ClipSetup):
    """``FamilySpec.setup``: the text settings recorded once the components load; image-to-video keeps its
    conditioning image and refuses still images."""

    run_state = staticmethod(run_state)
    text_to_video = "--family sanavideo (text-to-video)"
