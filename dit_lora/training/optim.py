"""Optimizer and learning-rate schedule construction: each optimizer of the table
(:mod:`dit_lora.config.optimizers`, which owns what else is known of them) built by its entry's builder."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import torch

from dit_lora.config import optimizers
from dit_lora.config.optimizers import Optimizer
from dit_lora.config.schema import TrainingOptions
from dit_lora.core.errors import UserError


class _AdamOptions(TypedDict):
    """The keywords every AdamW variant here takes from the --adam_* options."""

    betas: tuple[float, float]
    eps: float
    weight_decay: float


def _adam_options(training: TrainingOptions) -> _AdamOptions:
    return _AdamOptions(
        betas=(training.adam_beta1, training.adam_beta2),
        eps=training.adam_epsilon,
        weight_decay=training.adam_weight_decay,
    )


#: what builds an optimizer: (its table entry, ``cfg.training``, the parameter groups, the device) -> the optimizer
Builder = Callable[[Optimizer, TrainingOptions, list[dict], torch.device], torch.optim.Optimizer]


def make_optimizer(
    training: TrainingOptions, groups: list[dict], device: torch.device
) -> tuple[torch.optim.Optimizer, bool]:
    """The optimizer the run's ``training`` section (``cfg.training``: --optimizer, the --adam_*, --prodigy_*,
    --adafactor_* and --came_* options, --use_8bit_adam) asks for (:func:`~dit_lora.config.optimizers.chosen`), built
    by its entry's builder (:data:`BUILDERS`); returns (optimizer, whether the guard skips its step on the device:
    the entry's ``guard_skip``, or for AdamW whether torch's fused kernel runs)."""
    entry = optimizers.chosen(training.optimizer, training.use_8bit_adam)
    optimizer = BUILDERS[entry](entry, training, groups, device)
    skip = entry.guard_skip if entry.guard_skip is not None else bool(optimizer.defaults.get("fused"))
    return optimizer, skip


def _adamw(entry: Optimizer, training: TrainingOptions, groups: list[dict], device: torch.device):
    """torch's AdamW, fused where the device supports it (the guard then skips its step on the device), else
    ``foreach``."""
    # The fused kernel needs every parameter on one supported device in a floating dtype; master weights are fp32.
    fused = device.type in ("cuda", "cpu", "xpu", "mps")
    try:
        return torch.optim.AdamW(groups, fused=fused, **_adam_options(training))
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **_adam_options(training))


def _bitsandbytes_adamw8bit(entry: Optimizer, training: TrainingOptions, groups: list[dict], device: torch.device):
    """bitsandbytes' ``AdamW8bit`` with the --adam_* options; without bitsandbytes one paragraph."""
    try:
        import bitsandbytes as bnb
    except Exception as err:
        assert entry.package is not None
        raise UserError(entry.package.unimportable_message(entry.flag, err))
    return bnb.optim.AdamW8bit(groups, **_adam_options(training))


def _torchao_adamw(entry: Optimizer, training: TrainingOptions, groups: list[dict], device: torch.device):
    """:func:`~dit_lora.training.lowbit_adam.device_adamw` (torchao's update, the guard's interface) at the entry's
    bits with the --adam_* options; without torchao one paragraph."""
    from dit_lora.training.lowbit_adam import device_adamw

    try:
        return device_adamw(entry.moment_bits, groups, lr=training.learning_rate, **_adam_options(training))
    except ImportError as err:
        assert entry.package is not None
        raise UserError(entry.package.unimportable_message(entry.flag, err)) from err


def _prodigy(entry: Optimizer, training: TrainingOptions, groups: list[dict], device: torch.device):
    """:class:`~dit_lora.training.prodigy.DeviceProdigy` with diffusers' examples' arguments: the --adam_* betas,
    epsilon and weight decay, the --prodigy_* options. The guard drives it as fused AdamW (found_inf, a device
    learning rate): no host read."""
    from dit_lora.training.prodigy import DeviceProdigy

    adam = _adam_options(training)
    return DeviceProdigy(
        groups,
        lr=training.learning_rate,
        betas=adam["betas"],
        beta3=training.prodigy_beta3,
        eps=adam["eps"],
        weight_decay=adam["weight_decay"],
        decouple=training.prodigy_decouple,
        use_bias_correction=training.prodigy_use_bias_correction,
        safeguard_warmup=training.prodigy_safeguard_warmup,
    )


def _adafactor(entry: Optimizer, training: TrainingOptions, groups: list[dict], device: torch.device):
    """:class:`~dit_lora.training.adafactor.DeviceAdafactor` (the guard's interface) with the --adafactor_* options
    and --adam_weight_decay."""
    from dit_lora.training.adafactor import DeviceAdafactor

    return DeviceAdafactor(
        groups,
        lr=training.learning_rate,
        clip_threshold=training.adafactor_clip_threshold,
        decay_rate=training.adafactor_decay_rate,
        beta1=training.adafactor_beta1,
        weight_decay=training.adam_weight_decay,
        scale_parameter=training.adafactor_scale_parameter,
    )


def _came(entry: Optimizer, training: TrainingOptions, groups: list[dict], device: torch.device):
    """:class:`~dit_lora.training.came.DeviceCAME` (the guard's interface) with the --adam_* betas, --came_beta3,
    --came_clip_threshold and --adam_weight_decay."""
    from dit_lora.training.came import DeviceCAME

    return DeviceCAME(
        groups,
        lr=training.learning_rate,
        clip_threshold=training.came_clip_threshold,
        betas=(training.adam_beta1, training.adam_beta2, training.came_beta3),
        weight_decay=training.adam_weight_decay,
    )


#: each entry of the optimizer table (:data:`dit_lora.config.optimizers.TABLE`) and what builds it
BUILDERS: dict[Optimizer, Builder] = {
    optimizers.ADAMW: _adamw,
    optimizers.PRODIGY: _prodigy,
    optimizers.ADAFACTOR: _adafactor,
    optimizers.CAME: _came,
    optimizers.ADAMW8BIT: _torchao_adamw,
    optimizers.ADAMW4BIT: _torchao_adamw,
    optimizers.BITSANDBYTES_ADAMW8BIT: _bitsandbytes_adamw8bit,
}


def make_lr_scheduler(training: TrainingOptions, optimizer, max_steps: int):
    """A diffusers schedule (``training``: the --lr_* options of ``cfg.training``) stepped once per optimizer update
    (not once per process)."""
    from diffusers.optimization import get_scheduler

    return get_scheduler(
        training.lr_scheduler,
        optimizer=optimizer,
        num_warmup_steps=training.lr_warmup_steps,
        num_training_steps=max_steps,
        num_cycles=training.lr_num_cycles,
        power=training.lr_power,
    )
