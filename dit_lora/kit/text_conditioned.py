"""What the text-conditioned diffusion families (Sana, SANA-Video, Z-Image, FLUX.2, Qwen-Image) share: the cache
identity of a run's encoders, the setup that records the run's text settings, the run's flow tables kept in its
state, and the memory plan's transformer + VAE + text encoder on the meta device; and the caption encoders of a
pipeline whose captions have only a length (:class:`LengthCaptions`, a mixin: ``class FluxEncoders(LengthCaptions,
DiffusionEncoders)``) or that prefixes a complex human instruction (:class:`InstructedCaptions`).

A family states only what differs: the key its model stamp is stored under (kept as each family first wrote it,
so existing caches keep their names), the settings its captions are encoded with, its own ``run_state`` and its
model classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.conditioning import inspect_clips
from dit_lora.kit.latents import model_identity
from dit_lora.kit.prompts import (
    MASKED,
    CaptionLength,
    caption_length,
    default_instruction,
    instruction,
    pipeline_prompts,
)
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def encoder_identity(
    cfg: TrainConfig, family: str, *, stamp_key: str = "model_index_mtime", **settings: Any
) -> dict[str, Any]:
    """A text-conditioned family's cache identity: ``family``, the model (absolute when local), its stamp under
    ``stamp_key``, revision, variant and text dtype, then the family's ``settings``, then a quantized text encoder
    (its embeddings differ from the full-precision one's)."""
    return {
        "family": family,
        **model_identity(cfg, stamp_key),
        "text_dtype": cfg.training.mixed_precision,
        **settings,
        **({"text_encoder_quantized": "nf4"} if cfg.model.quantize_text_encoder else {}),
    }


class LengthCaptions:
    """``FamilySpec.encoders``' captions for a pipeline whose captions' only setting is their length (its
    ``encode_prompt``'s ``max_sequence_length``), a mixin before the kit's
    :class:`~dit_lora.kit.components.DiffusionEncoders` (``class FluxEncoders(LengthCaptions, DiffusionEncoders)``):
    the run's text settings, the cache identity they are part of, and the length the run recorded, which a family's
    ``encode_prompts`` encodes at. A family states its :attr:`caption_length` and the name (and stamp key, and what
    it adds) its cache identity keeps."""

    #: ``--max_sequence_length``, else the pipeline's default
    caption_length: CaptionLength
    #: the ``family`` and stamp key of the cache identity (kept as each family first wrote them)
    identity_family: str = ""
    stamp_key: str = "model_index_mtime"
    #: what the cache identity adds after the caption length (what the cached latents are), as ``(key, value)`` pairs
    identity_extra: tuple[tuple[str, str], ...] = ()

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's caption length (the only text setting)."""
        return self.caption_length.settings(cfg.data)

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp, revision, variant, text dtype and caption length, what the family adds (and a
        quantized encoder)."""
        return encoder_identity(
            cfg,
            identity_family(self),
            stamp_key=self.stamp_key,
            max_sequence_length=self.caption_length(cfg.data),
            **dict(self.identity_extra),
        )

    def recorded_length(self, comps: Components) -> int:
        """The caption length the run's text settings record (the pipeline's default before they are recorded)."""
        return self.caption_length.recorded(comps.state.text if comps.state is not None else None)


def identity_family(encoders: Any) -> str:
    """The ``family`` name of ``encoders``' cache identity; a class that states none is a mistake in its family (two
    such families would share their caches' names), refused by name."""
    if not encoders.identity_family:
        raise TypeError(f"{type(encoders).__name__} states no identity_family (the name its cache identity keeps)")
    return encoders.identity_family


class InstructedCaptions(DiffusionEncoders):
    """``FamilySpec.encoders``' captions for a pipeline whose ``encode_prompt`` takes a ``complex_human_instruction``
    (Gemma-2 captions with an instruction prefix): the run's text settings (its caption length and, with
    ``--complex_human_instruction``, the pipeline's default instruction), the cache identity they are part of, and
    captions through the pipeline's own ``encode_prompt`` at those settings (its prefix, truncation and token
    selection: training prompts are what the pipeline feeds the model at inference). A family states its pipeline,
    the name and stamp key its cache identity keeps, its caption length and what its cached latents are."""

    #: the diffusers pipeline whose ``encode_prompt`` and default instruction the captions go through
    pipeline: str = ""
    #: the ``family`` and stamp key of the cache identity (kept as each family first wrote them)
    identity_family: str = ""
    stamp_key: str = "model_index_mtime"
    #: the pipeline's default ``max_sequence_length``
    default_length: int = 300
    #: what the cache identity adds after the text settings (what the cached latents are), as ``(key, value)`` pairs
    identity_extra: tuple[tuple[str, str], ...] = ()

    def text_length(self, cfg: TrainConfig) -> int:
        """The run's caption length: the pipeline's default (a family whose length is a flag says so here)."""
        return self.default_length

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's caption length and, with ``--complex_human_instruction``, the pipeline's instruction prefix."""
        prefix = default_instruction(self.pipeline) if cfg.family_options.complex_human_instruction else None
        return TextSettings(max_sequence_length=self.text_length(cfg), instruction=prefix)

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp, revision, variant and text dtype, the text settings, what the cached latents are
        (and a quantized encoder)."""
        return encoder_identity(
            cfg,
            identity_family(self),
            stamp_key=self.stamp_key,
            complex_human_instruction=cfg.family_options.complex_human_instruction,
            max_sequence_length=self.text_length(cfg),
            **dict(self.identity_extra),
        )

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions (and their masks) through the pipeline's own ``encode_prompt`` at the run's text settings."""
        text = comps.state.text if comps.state is not None else None
        return pipeline_prompts(
            comps,
            self.pipeline,
            captions,
            with_negative=with_negative,
            keys=MASKED,
            max_sequence_length=caption_length(text, self.default_length),
            complex_human_instruction=instruction(text),
        )


class TextSettingsSetup:
    """``FamilySpec.setup``: the run's :class:`~dit_lora.contract.capabilities.TextSettings` recorded in its run
    state once the components load (what the family's ``encode_prompts`` encodes with); the samples are not
    inspected (as :class:`~dit_lora.kit.components.DiffusionSetup`, the setup that does nothing). A family gives its
    own ``run_state`` function (a subclass that does more may set :attr:`run_state` instead)."""

    #: the family's ``run_state(comps)``: its typed ``comps.state`` (with a ``text`` field)
    run_state: Callable[[Components], Any]

    def __init__(self, encoders: Any, run_state: Callable[[Components], Any] | None = None) -> None:
        self.encoders = encoders
        if run_state is not None:
            self.run_state = run_state

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """Record the run's text settings in the family's run state."""
        self.run_state(comps).text = self.encoders.text_settings(cfg)

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Check the screened samples against the loaded model (nothing here)."""


class ClipSetup(TextSettingsSetup):
    """``FamilySpec.setup`` of a video family: the text settings; image-to-video refuses still images and keeps its
    conditioning image (:func:`~dit_lora.kit.conditioning.inspect_clips`). A family states its
    ``run_state`` and :attr:`text_to_video`, the family that trains the images image-to-video refuses."""

    #: how a refusal names the text-to-video family, e.g. ``"--family ltx2 (text-to-video)"``
    text_to_video: str

    def __init__(self, encoders: Any, task: Any) -> None:
        super().__init__(encoders)
        self.task = task

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Image-to-video: refuse images (a one-frame clip has no frame after the conditioning one to learn) and
        keep the first clip's first frame (or ``--validation_image``) for validation clips."""
        inspect_clips(self.task, cfg, self.run_state(comps), samples, self.text_to_video)


def run_tables(state, comps: Components, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's flow tables ``(sigmas, timesteps)`` kept in ``state.flow_tables``: built on ``device`` once when
    the components were built by hand (not per step)."""
    if state.flow_tables is None:
        state.flow_tables = flow_tables(comps.scheduler, device)
    return state.flow_tables


def meta_components(
    cfg: TrainConfig, read, depth: int | None, *, transformer_class, depth_key: str, vae_class, state
) -> Components:
    """A memory plan's components: the transformer (``depth``: that many blocks, counted by its config's
    ``depth_key``) in the run's dtype, the VAE (``vae_class``, fp32) and the text encoder on the meta device, built
    from the configs ``read`` returns, with the checkpoint's training scheduler and the family's run ``state``."""
    dtype = cfg.weight_dtype
    transformer = diffusers_on_meta(
        transformer_class, with_depth(read("transformer", "config.json"), depth_key, depth), dtype
    )
    vae = diffusers_on_meta(vae_class, read("vae", "config.json"), torch.float32)
    text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype)
    scheduler = training_scheduler(read("scheduler", "scheduler_config.json") or {})
    return Components(
        model=transformer, scheduler=scheduler, encoders={"vae": vae, "text_encoder": text_encoder}, state=state
    )
