"""FLUX.1's own options (``--family flux``, ``flux_kontext``): the timestep shift, the guidance fed to the guidance
embedding, and Kontext's control images."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FINITE, POSITIVE, FamilyOptions, opt
from dit_lora.modeling.timestep_options import ConditioningImageOptions, FlowMatchingOptions, LogitNormalOptions


@dataclass(frozen=True)
class FluxOptions(FlowMatchingOptions, LogitNormalOptions, FamilyOptions):
    """Options only FLUX.1 reads (``--weighting_scheme``, ``--logit_mean``/``--logit_std``, ``--mode_scale`` come from
    the shared flow-matching and logit-normal groups)."""

    TITLE = "flux options (--family flux or flux_kontext)"

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


@dataclass(frozen=True)
class KontextOptions(FluxOptions, ConditioningImageOptions):
    """FLUX.1 Kontext (``--family flux_kontext``): FLUX.1's options, the validation control image and where each
    sample's control image is named."""

    TITLE = "flux_kontext options (--family flux_kontext)"

    cond_image_column: str | None = opt(
        None,
        "FLUX.1 Kontext: the metadata column naming each sample's control image (the image to edit; a path relative "
        "to the metadata file), diffusers' train_dreambooth_lora_flux_kontext.py flag. Default: the first of "
        "`control_image`, `control_images`, `edit_image` (DiffSynth-Studio), `control_path` and musubi-tuner's "
        "`control_path_0` that a row fills.",
        section="flux",
        resume="fixed",
    )
    cond_image_dir: str | None = opt(
        None,
        "FLUX.1 Kontext: a folder of control images named as the targets, as musubi-tuner's control_directory and "
        "ai-toolkit's control_path lay them out (`<target stem>.<any image extension>`, subfolders as under "
        "--train_data_dir). Used for the samples whose metadata row names no control image.",
        section="flux",
        resume="fixed",
    )
