"""Options shared by the diffusion families: the timestep density of flow-matching / logit-normal training.

A family's options class lists the groups it reads beside :class:`FamilyOptions`: Sana :class:`FlowMatchingOptions` and
:class:`LogitNormalOptions`; CogVideoX, Wan and Z-Image :class:`TimestepSamplingOptions` (``--timestep_sampling
uniform|logit_normal``) and :class:`LogitNormalOptions`; Wan and Z-Image :class:`FlowShiftOptions` (``--flow_shift``);
the image-to-video families :class:`ConditioningImageOptions`; Sana and SANA-Video :class:`CaptionInstructionOptions`
(their pipelines' complex human instruction); Sana and Chroma :class:`TextPaddingOptions` (``--trim_text_padding``).
A flag has one owner, so a group two families share lives here.

Each group is a flat frozen dataclass built on nothing, not a :class:`FamilyOptions`: a family's class sits one level
above it, and a task built on its family's class (``WanI2VOptions`` on ``WanOptions``) two, the most
(``tests/config/test_option_depth.py``). A group that reads another's options (the density's ``--logit_mean`` and
``--logit_std``) is listed beside it by the families, not built on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FINITE, POSITIVE, WEIGHTING_SCHEMES, opt


@dataclass(frozen=True)
class LogitNormalOptions:
    """The logit-normal timestep density: its mean and standard deviation."""

    logit_mean: float = opt(
        0.0, "Mean of the logit-normal timestep density.", section="flow matching", resume="fixed", valid=FINITE
    )
    logit_std: float = opt(
        1.0,
        "Standard deviation of the logit-normal timestep density.",
        section="flow matching",
        resume="fixed",
        valid=POSITIVE,
    )


@dataclass(frozen=True)
class FlowMatchingOptions:
    """Flow-matching training: the timestep density / loss weighting scheme (diffusers.training_utils); its
    ``logit_normal`` density reads :class:`LogitNormalOptions`, listed beside it."""

    weighting_scheme: str = opt(
        "logit_normal",
        "Timestep density / loss weighting from diffusers.training_utils (default logit_normal).",
        choices=WEIGHTING_SCHEMES,
        section="flow matching",
        resume="fixed",
    )
    mode_scale: float = opt(
        1.29, "Scale of the `mode` timestep density.", section="flow matching", resume="fixed", valid=FINITE
    )


@dataclass(frozen=True)
class TimestepSamplingOptions:
    """How training timesteps are drawn where the reference trainers draw them uniformly (CogVideoX, Wan); its
    ``logit_normal`` reads :class:`LogitNormalOptions`, listed beside it."""

    timestep_sampling: str = opt(
        "uniform",
        "How training timesteps are drawn: `uniform` (the reference trainers: CogVideoX over 0..999; Wan and "
        "Z-Image over the checkpoint's shifted flow-matching schedule, Wan A14B over the trained expert's part of "
        "it) or `logit_normal` "
        "(--logit_mean/--logit_std; CogVideoX: fewer of the near-t=0 steps whose loss weight reaches ~1000x).",
        choices=("uniform", "logit_normal"),
        section="flow matching",
        resume="fixed",
    )


@dataclass(frozen=True)
class ConditioningImageOptions:
    """The conditioning image of validation samples (image-to-video, image editing)."""

    validation_image: str | None = opt(
        None,
        "The conditioning image of validation samples: the first frame of image-to-video validation videos, the "
        "control image of an edit model's. Default: the first training sample's (its first frame, its control image).",
        section="conditioning image",
        resume="free",
    )


@dataclass(frozen=True)
class TrainedSizeOptions:
    """Video families: the guard against sizes far from the checkpoint's trained one."""

    allow_untrained_resolution: bool = opt(
        False,
        "Train at a video size whose latent tokens per clip are far from the checkpoint's trained size, which is "
        "refused otherwise: CogVideoX over 2x or under 1/4 of 1.0's 49x480x720 or 1.5's 81x768x1360; Wan over 2x "
        "81x720x1280 (TI2V-5B 121x704x1280).",
        section="video size",
        resume="free",
    )


@dataclass(frozen=True)
class FlowShiftOptions:
    """A fixed shift of the training timestep schedule, for the families that train on a static shifted schedule."""

    flow_shift: float | None = opt(
        None,
        "Shift of the training timestep schedule (sigma' = shift*sigma / (1 + (shift-1)*sigma)). Default: the "
        "checkpoint's scheduler shift (Wan 2.1 and 2.2 A14B 3.0, TI2V-5B 5.0, as diffusers' conversion writes them; "
        "Z-Image 6.0, Z-Image-Turbo 3.0); SANA-Video 3.0, NVlabs' training shift (its scheduler holds the sampling "
        "shift 8.0). DiffSynth-Studio trains every Wan model at 5.0; musubi-tuner's "
        "--discrete_flow_shift is this option.",
        section="flow matching",
        resume="fixed",
        valid=POSITIVE,
    )


@dataclass(frozen=True)
class TextPaddingOptions:
    """Cutting the caption padding no cached caption reaches (Sana, Chroma: their attention masks it)."""

    trim_text_padding: bool = opt(
        True,
        "Cut the caption padding that no cached caption reaches (the attention masks it in every sample) from "
        "every batch, once per run from the latent cache: the same function over fewer keys, up to float rounding. "
        "Only with --cache_latents; false keeps all --max_sequence_length tokens.",
        section="captions",
        resume="free",
    )


@dataclass(frozen=True)
class CaptionInstructionOptions:
    """The instruction prefix Gemma-2 captions get at inference (``SanaPipeline``, ``SanaVideoPipeline``)."""

    complex_human_instruction: bool = opt(
        True,
        "Prefix captions with the pipeline's complex-human-instruction during training, as the pipeline "
        "(SanaPipeline, SanaVideoPipeline, SanaImageToVideoPipeline) does at inference, so training and inference "
        "prompts match.",
        section="captions",
        resume="fixed",
    )
