"""The checks of a parsed config that need no model or data: ranges, options that exclude or need each other, the
output name, and the optional packages some options need.

They run on every :class:`TrainConfig` however it was made (parsed, or built in code), before any model loads; each
refusal is one paragraph naming the options and the fix.
"""

from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path

from dit_lora.config import optimizers
from dit_lora.config.data_kind import video_llm_data_message
from dit_lora.config.dataset_config import check_data_sets
from dit_lora.config.schema import TrainConfig, TrainingOptions, ValidationOptions, config_fields
from dit_lora.config.values import range_message
from dit_lora.core.errors import UserError


def validate_static(cfg: TrainConfig, *, needs_data: bool = True) -> None:
    """Checks that need no model or data: ranges and combinations of options, and optional packages (not for
    ``dit-lora plan``, ``needs_data=False``: it plans a run on a GPU it need not be on, with no package imported:
    the run checks them where it starts)."""
    check_ranges(cfg)
    check_combinations(cfg, needs_data=needs_data)
    if needs_data:
        check_optional_packages(cfg.training, cfg.validation)


def check_ranges(cfg: TrainConfig) -> None:
    """Every numeric option finite and inside its range (``valid`` in the schema), however the config was made:
    the common options, then the family's."""
    for f in config_fields():
        message = range_message(f.name, cfg.option(f.name))
        if message is not None:
            raise UserError(message)
    for f in fields(cfg.family_options):
        message = range_message(f.name, getattr(cfg.family_options, f.name))
        if message is not None:
            raise UserError(message)


def check_combinations(cfg: TrainConfig, *, needs_data: bool = True) -> None:
    """Options that exclude or need each other: frame buckets, fp16, the model and data source, the Hub."""
    if cfg.video.frame_buckets:
        clash = [f"--{n}" for n in ("max_num_frames", "height", "width") if getattr(cfg.video, n) is not None]
        if clash:
            raise UserError(
                f"--frame_buckets {cfg.video.frame_buckets} sets every clip's frames and size, so {', '.join(clash)} would "
                f"be ignored. Remove {' and '.join(clash)}, or drop --frame_buckets to train one size."
            )
    optimizers.check_options(cfg.training, cfg.is_set)  # what goes with --optimizer: the optimizer table's checks
    if cfg.training.mixed_precision == "fp16" and not cfg.training.allow_fp16:
        raise UserError(
            "--mixed_precision fp16 is refused: fp16 overflows (65504 max) inside Sana's linear attention and "
            "Gemma/Mistral activations, the root cause of the NaN losses reported for Sana and VideoChat2. Use "
            "--mixed_precision bf16 (the default; same memory, fp32 range). If your GPU has no bf16 and you "
            "accept the risk, add --allow_fp16 (a GradScaler is then used)."
        )
    if cfg.training.mixed_precision == "fp16":
        import torch

        if not torch.cuda.is_available():
            raise UserError(
                "--mixed_precision fp16 --allow_fp16 needs a CUDA GPU (fp16 autocast and GradScaler are GPU "
                "features). Use --mixed_precision bf16, which also works on CPU."
            )
    if not cfg.model.pretrained_model_name_or_path:
        family_given = cfg.is_set("family")  # a config built in code: a family off the default counts as set
        video_llm = None if family_given else video_llm_data_message(cfg.data.train_data_dir)
        if video_llm:  # not "a local diffusers folder": the data says a video LLM trains it
            raise UserError(video_llm)
        raise UserError(
            "No model given: set --pretrained_model_name_or_path to a Hub id (e.g. "
            "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers) or a local diffusers folder."
        )
    if not cfg.data.dataset_config and not cfg.model.demo and needs_data:
        check_one_source(cfg.data.train_data_dir, cfg.data.dataset_name, "images or videos with captions")
    check_data_sets(cfg)
    if cfg.data.validation_split is not None and cfg.data.validation_data_dir:
        raise UserError(
            f"--validation_split {cfg.data.validation_split:g} and --validation_data_dir `{cfg.data.validation_data_dir}` both "
            "name the held-out samples of the validation loss: the split holds out part of the training data, the "
            "folder is a separate data set. Give one of them."
        )
    check_output_name(cfg.training.output_name)
    if cfg.validation.validation_epochs is not None and cfg.is_set("validation_steps"):
        raise UserError(
            f"--validation_epochs {cfg.validation.validation_epochs} and --validation_steps "
            f"{cfg.validation.validation_steps} both say how often to validate. Give one of them."
        )
    if cfg.hub.push_later_ok and not cfg.hub.push_to_hub:
        # Accepting it would let a user believe the run pushes later, when nothing is pushed at all.
        raise UserError(
            "--push_later_ok only says what --push_to_hub does when the start-of-run check finds that the push "
            "cannot happen, but --push_to_hub is off, so nothing would be pushed. Add --push_to_hub (with "
            "--hub_model_id) to upload the adapter at the end, or drop --push_later_ok."
        )


#: the names dit-lora's own files use: a named copy of one of them would be taken for (or replace) that file
RESERVED_NAMES = ("pytorch_lora_weights", "adapter_model", "dit_lora_backbone")


def check_output_name(name: str | None) -> None:
    """``--output_name``: a plain file name without its extension (the copy is ``NAME.safetensors`` in --output_dir),
    refused in one paragraph otherwise."""
    if name is None:
        return
    problem = None
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._+-]*", name) or name.endswith("."):
        problem = "is not a plain file name (letters, digits, space, `.`, `_`, `+` and `-`, not starting with a dot)"
    elif name.lower().endswith(".safetensors"):
        problem = "ends with .safetensors, which the copy adds itself"
    elif name.lower() in RESERVED_NAMES or name.lower().startswith(tuple(n + "_" for n in RESERVED_NAMES)):
        problem = "is a name of dit-lora's own files"
    if problem:
        stem = Path(name).name.removesuffix(".safetensors") or "my-lora"
        raise UserError(
            f"--output_name `{name}` {problem}. It names the adapter's copy NAME.safetensors in --output_dir (and "
            f"NAME_comfyui..., NAME_ema...); give a file name without its extension, e.g. --output_name {stem}."
        )


def check_optional_packages(training: TrainingOptions, validation: ValidationOptions) -> None:
    """Packages that only some options need (wandb, bitsandbytes, torchao), imported to prove they work here."""
    if validation.report_to == "wandb":
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise UserError(
                "--report_to wandb needs the `wandb` package: `pip install wandb`, or use --report_to tensorboard."
            )
    optimizers.check_packages(training)  # bitsandbytes, torchao: each optimizer's own (the optimizer table)


def check_one_source(train_data_dir: str | os.PathLike | None, dataset_name: str | None, what: str) -> None:
    """Raise the one paragraph for both or neither of --train_data_dir and --dataset_name (``what``: the folder's
    content)."""
    if bool(train_data_dir) == bool(dataset_name):
        both = "both were given" if train_data_dir else "neither was given"
        raise UserError(
            f"Pass exactly one data source: --train_data_dir (a local folder of {what}) or --dataset_name (a Hugging "
            f"Face dataset id or a folder `datasets` can open); {both}."
        )
