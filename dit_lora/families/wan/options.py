"""Wan's own options: text-to-video (``--family wan``) and image-to-video (``--family wan_i2v``, which adds the
conditioning image). The timestep density and the validation image are groups shared with CogVideoX
(:mod:`dit_lora.modeling.timestep_options`)."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import PROBABILITY, FamilyOptions, opt
from dit_lora.modeling.timestep_options import (
    ConditioningImageOptions,
    FlowShiftOptions,
    LogitNormalOptions,
    TimestepSamplingOptions,
    TrainedSizeOptions,
)

#: the tiny offline pipelines ``--demo`` can build (:mod:`.demo`)
DEMO_VARIANTS = ("2.1-t2v", "2.1-i2v", "2.2-ti2v", "2.2-t2v-a14b", "2.2-i2v-a14b")


@dataclass(frozen=True)
class WanOptions(TimestepSamplingOptions, LogitNormalOptions, TrainedSizeOptions, FlowShiftOptions, FamilyOptions):
    """Options only Wan (both tasks) reads."""

    TITLE = "wan options (--family wan or wan_i2v)"

    wan_expert: str | None = opt(
        None,
        "Wan 2.2 A14B (two experts): which expert gets the LoRA: `high` (`transformer`, the high-noise expert: "
        "timesteps >= boundary_ratio x 1000), `low` (`transformer_2`, the rest) or `both` (one adapter each; "
        "steps alternate high, low). Only the trained expert's steps' timesteps are drawn. Default `both`; "
        "refused for single-expert checkpoints.",
        choices=("high", "low", "both"),
        section="wan",
        resume="fixed",
    )
    offload_inactive_expert: bool = opt(
        True,
        "--wan_expert both: keep the frozen weights of the expert not trained at the current step in CPU memory "
        "(about 28 GB per 14B expert in bf16) instead of on the accelerator; the copy back is asynchronous.",
        section="wan",
        resume="free",
    )
    ti2v_image_probability: float | None = opt(
        None,
        "Wan 2.2 TI2V-5B: fraction of samples trained in image-to-video mode (the clip's first latent frame is "
        "given clean with timestep 0 on its tokens, as the pipelines do with expand_timesteps). Default 0 for "
        "--family wan, 1 for --family wan_i2v; refused for other checkpoints.",
        section="wan",
        resume="fixed",
        valid=PROBABILITY,
    )
    demo_wan_variant: str = opt(
        "2.1-t2v",
        "Wan demo: which checkpoint the tiny offline pipeline copies.",
        choices=DEMO_VARIANTS,
        section="wan",
        resume="fixed",
    )


@dataclass(frozen=True)
class WanI2VOptions(WanOptions, ConditioningImageOptions):
    """Wan image-to-video: the Wan options plus the conditioning image's."""

    TITLE = "wan_i2v options (--family wan_i2v)"
