"""FLUX.1's own options (``--family flux``): the timestep shift and the guidance fed to the guidance embedding."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FINITE, POSITIVE, opt
from dit_lora.modeling.timestep_options import FlowMatchingOptions


@dataclass(frozen=True)
class FluxOptions(FlowMatchingOptions):
    """Options only FLUX.1 reads (``--weighting_scheme``, ``--logit_mean``/``--logit_std``, ``--mode_scale`` come from
    the shared flow-matching group)."""

    TITLE = "flux options (--family flux)"

    flux_shift: float | None = opt(
        None,
        "FLUX.1: the flow shift applied to every drawn timestep (sigma -> s*sigma / (1 + (s-1)*sigma)). Default: per "
        "batch from its latent tokens, s = exp(mu) with mu linear from base_shift at base_image_seq_len to max_shift "
        "at max_image_seq_len of the checkpoint's scheduler config (0.5 at 256 tokens to 1.15 at 4096), the shift "
        "FluxPipeline samples with; 3 is the checkpoint's static shift, which diffusers' example bakes in.",
        section="flux",
        resume="fixed",
        valid=POSITIVE,
    )
    flux_train_guidance: float = opt(
        1.0,
        "FLUX.1 [dev] (guidance-distilled): the value its guidance embedding is given while training, said in the "
        "model card. Default 1.0, SimpleTuner's --flux_guidance_value default (it keeps the dev model's guidance "
        "distillation, its help says) and dit-lora's FLUX.2 [dev] default; diffusers' train_dreambooth_lora_flux.py "
        "uses 3.5, FluxPipeline's sampling default.",
        section="flux",
        resume="fixed",
        valid=FINITE,
    )
