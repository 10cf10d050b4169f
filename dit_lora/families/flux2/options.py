"""FLUX.2's own options (``--family flux2``): the timestep density, its shift and the guidance fed to FLUX.2 [dev]."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FINITE, POSITIVE, FamilyOptions, opt
from dit_lora.modeling.timestep_options import FlowMatchingOptions, LogitNormalOptions


@dataclass(frozen=True)
class Flux2Options(FlowMatchingOptions, LogitNormalOptions, FamilyOptions):
    """Options only FLUX.2 reads (``--weighting_scheme``, ``--logit_mean``/``--logit_std``, ``--mode_scale`` come
    from the shared flow-matching and logit-normal groups; musubi-tuner's ``flux2_shift`` draws logit-normal, the
    default)."""

    TITLE = "flux2 options (--family flux2)"

    flux2_shift: float | None = opt(
        None,
        "FLUX.2: the flow shift applied to every drawn timestep (sigma -> s*sigma / (1 + (s-1)*sigma)). Default: "
        "per batch from its latent tokens, s = exp(mu) with mu linear from base_shift at base_image_seq_len to "
        "max_shift at max_image_seq_len of the checkpoint's scheduler config (0.5 at 256 tokens to 1.15 at 4096: "
        "musubi-tuner's flux2_shift, ai-toolkit); 1 trains without a shift (diffusers' example).",
        section="flux2",
        resume="fixed",
        valid=POSITIVE,
    )
    flux2_train_guidance: float = opt(
        1.0,
        "FLUX.2 [dev] (guidance-distilled): the guidance value its guidance embedding is given while training "
        "(musubi-tuner and ai-toolkit: 1.0; diffusers' example: 3.5). The klein models have no guidance "
        "embedding and ignore it.",
        section="flux2",
        resume="fixed",
        valid=FINITE,
    )
    flux2_demo_variant: str = opt(
        "dev",
        "FLUX.2 with --demo: the tiny random pipeline to build, `dev` (Flux2Pipeline: Mistral-3, guidance "
        "embedding) or `klein` (Flux2KleinPipeline: Qwen3, no guidance embedding).",
        choices=("dev", "klein"),
        section="flux2",
        resume="fixed",
    )
