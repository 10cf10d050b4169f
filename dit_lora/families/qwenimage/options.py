"""Qwen-Image's own options (``--family qwenimage`` and the Edit names): the timestep shift and density."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import POSITIVE, FamilyOptions, opt
from dit_lora.modeling.timestep_options import ConditioningImageOptions, FlowMatchingOptions, LogitNormalOptions

#: how the training sigmas are shifted (:mod:`.shift`)
SHIFT_MODES = ("dynamic", "fixed", "none")


@dataclass(frozen=True)
class QwenImageOptions(FlowMatchingOptions, LogitNormalOptions, FamilyOptions):
    """Options only the Qwen-Image family reads (the density, ``--weighting_scheme`` logit_normal by default, comes
    from the shared flow-matching and logit-normal groups: musubi-tuner's ``qwen_shift`` draws sigmoid(N(0, 1)) too)."""

    TITLE = "qwenimage options (--family qwenimage, qwenimage_edit or qwenimage_edit_plus)"

    qwen_shift_mode: str = opt(
        "dynamic",
        "Qwen-Image: shift of the training sigmas. `dynamic`: per resolution, mu from the image's token count with "
        "the checkpoint scheduler's base/max shift (QwenImagePipeline's calculate_shift; musubi-tuner's "
        "--timestep_sampling qwen_shift); `fixed`: --qwen_fixed_shift for every size (musubi-tuner's shift with "
        "--discrete_flow_shift); `none`: unshifted (diffusers' train_dreambooth_lora_qwen_image.py).",
        choices=SHIFT_MODES,
        section="qwenimage",
        resume="fixed",
    )
    qwen_fixed_shift: float = opt(
        2.2,
        "Qwen-Image: the shift of --qwen_shift_mode fixed (sigma' = s*sigma / (1 + (s-1)*sigma)); 2.2 is what "
        "musubi-tuner's guide trains with, about the dynamic shift at 1328 x 1328.",
        section="qwenimage",
        resume="fixed",
        valid=POSITIVE,
    )


@dataclass(frozen=True)
class QwenImageEditOptions(QwenImageOptions, ConditioningImageOptions):
    """The Edit models: the text-to-image options, the validation control image and the metadata column."""

    TITLE = "qwenimage_edit options (--family qwenimage_edit or qwenimage_edit_plus)"

    qwen_control_column: str | None = opt(
        None,
        "Qwen-Image-Edit: the metadata column naming each sample's control image(s) (a path, or a JSON list of "
        "paths, relative to the metadata file). Default: the first of `control_image`, `control_images`, "
        "`edit_image` (DiffSynth-Studio), `control_path` and musubi-tuner's `control_path_0`, `control_path_1` ... "
        "that a row fills.",
        section="qwenimage",
        resume="fixed",
    )
    qwen_control_dir: str | None = opt(
        None,
        "Qwen-Image-Edit: a folder of control images named as the targets, as musubi-tuner's control_directory and "
        "ai-toolkit's control_path lay them out: `<target stem>.<any image extension>` for one, "
        "`<target stem>_0.png`, `<target stem>_1.png` ... for several (subfolders as under --train_data_dir). Used "
        "for the samples whose metadata row names no control image.",
        section="qwenimage",
        resume="fixed",
    )
