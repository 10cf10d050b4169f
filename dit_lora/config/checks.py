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

from dit_lora.config.data_kind import video_llm_data_message
from dit_lora.config.dataset_config import check_data_sets
from dit_lora.config.schema import TrainConfig, config_fields
from dit_lora.config.values import range_message
from dit_lora.core.errors import UserError


def validate_static(cfg: TrainConfig, *, needs_data: bool = True) -> None:
    """Checks that need no model or data: ranges and combinations of options, and optional packages (not for
    ``dit-lora plan``, ``needs_data=False``: it plans a run on a GPU it need not be on, with no package imported:
    the run checks them where it starts)."""
    check_ranges(cfg)
    check_combinations(cfg, needs_data=needs_data)
    if needs_data:
        check_optional_packages(cfg)


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
    _check_optimizer(cfg)
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


def _check_optimizer(cfg: TrainConfig) -> None:
    """--optimizer prodigy, adafactor, came, adamw8bit or adamw4bit takes neither bitsandbytes' 8-bit AdamW nor
    fp16's gradient scaler (which steps an optimizer by reading its inf check on the host); the --prodigy_*,
    --adafactor_* and --came_* options need their optimizer, and the --adam_* options an optimizer that reads them
    (never accepted and then ignored)."""
    name = cfg.training.optimizer
    for owner, options in OPTIMIZER_OPTIONS.items():
        given = [f"--{o}" for o in options if cfg.is_set(o)]
        if owner != name and given:
            raise UserError(
                f"{', '.join(given)} set{'s' if len(given) == 1 else ''} {OPTIMIZER_TITLES[owner]}, but the optimizer "
                f"is {name}, which never reads {'it' if len(given) == 1 else 'them'}. Add --optimizer {owner}, or drop "
                f"{'the option' if len(given) == 1 else 'them'}."
            )
    if name == "adamw":
        return
    _check_adam_options(cfg, name)
    title = OPTIMIZER_TITLES[name]
    if cfg.training.use_8bit_adam:
        fix = (
            f"Drop --use_8bit_adam: {title} is the 8-bit AdamW the guard skips on the device without a host sync"
            if name == "adamw8bit"
            else f"Drop --use_8bit_adam to train with {title}, or --optimizer {name} for the 8-bit AdamW"
        )
        raise UserError(
            f"--use_8bit_adam and --optimizer {name} ask for two optimizers: --use_8bit_adam is bitsandbytes' 8-bit "
            f"AdamW. {fix}."
        )
    if cfg.training.mixed_precision == "fp16":
        raise UserError(
            f"--optimizer {name} with --mixed_precision fp16: fp16's gradient scaler decides each step on the host, "
            f"which {title}'s device-side skip does not go through (not verified). Use bf16 (the default) or no."
        )


def _check_adam_options(cfg: TrainConfig, name: str) -> None:
    """Adafactor reads none of --adam_beta1, --adam_beta2 and --adam_epsilon, CAME no --adam_epsilon (its two are
    its own): given, they are refused."""
    unread = {"adafactor": ("adam_beta1", "adam_beta2", "adam_epsilon"), "came": ("adam_epsilon",)}.get(name, ())
    adam = [f"--{o}" for o in unread if cfg.is_set(o)]
    if name == "adafactor" and adam:
        raise UserError(
            f"{', '.join(adam)} with --optimizer adafactor: Adafactor has no Adam betas or epsilon (of the --adam_* "
            "options it reads only --adam_weight_decay). Drop them; --adafactor_beta1 gives it a first moment, "
            "--adafactor_decay_rate sets how its second moments decay."
        )
    if name == "came" and adam:
        raise UserError(
            "--adam_epsilon with --optimizer came: CAME has no Adam epsilon; its two floors (1e-30 under the "
            "squared gradients, 1e-16 under the instability) are came-pytorch's defaults, not options. Drop it; "
            "--adam_beta1, --adam_beta2 and --came_beta3 are its betas."
        )


#: the options only one --optimizer reads
OPTIMIZER_OPTIONS = {
    "prodigy": ("prodigy_beta3", "prodigy_decouple", "prodigy_use_bias_correction", "prodigy_safeguard_warmup"),
    "adafactor": ("adafactor_scale_parameter", "adafactor_beta1", "adafactor_clip_threshold", "adafactor_decay_rate"),
    "came": ("came_beta3", "came_clip_threshold"),
}
#: each --optimizer's name in messages
OPTIMIZER_TITLES = {
    "adamw": "AdamW",
    "prodigy": "Prodigy",
    "adafactor": "Adafactor",
    "came": "CAME",
    "adamw8bit": "torchao's 8-bit AdamW",
    "adamw4bit": "torchao's 4-bit AdamW",
}


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


def check_optional_packages(cfg: TrainConfig) -> None:
    """Packages that only some options need (wandb, bitsandbytes, torchao), imported to prove they work here."""
    if cfg.validation.report_to == "wandb":
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise UserError(
                "--report_to wandb needs the `wandb` package: `pip install wandb`, or use --report_to tensorboard."
            )
    if cfg.training.use_8bit_adam:
        try:
            import bitsandbytes  # noqa: F401
            import torch

            if not torch.cuda.is_available():
                raise ImportError("no CUDA device")
        except Exception as err:  # bitsandbytes raises various errors without CUDA
            raise UserError(
                f"--use_8bit_adam needs bitsandbytes on a CUDA GPU ({type(err).__name__}: {err}). Install the "
                "`quant` extra (`pip install dit-lora[quant]`) on a GPU machine, or drop --use_8bit_adam."
            )
    if cfg.training.optimizer in ("adamw8bit", "adamw4bit"):
        try:
            from torchao.optim import AdamW4bit, AdamW8bit  # noqa: F401
        except Exception as err:
            raise UserError(
                f"--optimizer {cfg.training.optimizer} needs torchao's low-bit AdamW ({type(err).__name__}: {err}). "
                "Install the `quant` extra (`pip install 'dit-lora[quant]' -c constraints.txt`: torchao 0.18), or "
                "use --optimizer adamw."
            )


def check_one_source(train_data_dir: str | os.PathLike | None, dataset_name: str | None, what: str) -> None:
    """Raise the one paragraph for both or neither of --train_data_dir and --dataset_name (``what``: the folder's
    content)."""
    if bool(train_data_dir) == bool(dataset_name):
        both = "both were given" if train_data_dir else "neither was given"
        raise UserError(
            f"Pass exactly one data source: --train_data_dir (a local folder of {what}) or --dataset_name (a Hugging "
            f"Face dataset id or a folder `datasets` can open); {both}."
        )
