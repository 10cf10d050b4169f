"""Optimizer and learning-rate schedule construction."""

from __future__ import annotations

from typing import TypedDict

import torch

from dit_lora.config.schema import TrainingOptions
from dit_lora.core.errors import UserError


class _AdamOptions(TypedDict):
    """The keywords every AdamW variant here takes from the --adam_* options."""

    betas: tuple[float, float]
    eps: float
    weight_decay: float


#: a learning rate this low is no Prodigy multiplier, and one this high is no step size of the other optimizers (a
#: LoRA's usual AdamW rate is 1e-4 to 1e-3; Prodigy's multiplier is about 1)
PRODIGY_LOWEST, STEP_HIGHEST = 0.1, 0.1


def learning_rate_warning(training: TrainingOptions) -> str | None:
    """One line when --learning_rate is on the wrong scale for --optimizer, as diffusers' examples warn of Prodigy's:
    Prodigy's multiplier far below 1 trains at that fraction of the step it finds; 0.1 or more for an optimizer
    whose learning rate is the step (AdamW's variants, Adafactor, CAME) is Prodigy's scale and diverges."""
    rate, name = training.learning_rate, training.optimizer
    if name == "prodigy" and rate < PRODIGY_LOWEST:
        return (
            f"--optimizer prodigy with --learning_rate {rate:g}: Prodigy finds its own step size and --learning_rate "
            f"multiplies it, so this trains at {rate:g} of the step it finds. Its authors and diffusers' examples use "
            "--learning_rate 1.0 (left out, that is the default with prodigy)."
        )
    if name != "prodigy" and rate >= STEP_HIGHEST:
        return (
            f"--learning_rate {rate:g} with --optimizer {name}: that is Prodigy's scale (a multiplier of its own "
            f"estimate), but {name} takes it as the step itself, 100 to 10,000 times a LoRA's usual 1e-4 to 1e-3: "
            "the weights blow up in a few steps (the guard then rolls back and stops). Use --learning_rate 1e-4, or "
            "--optimizer prodigy."
        )
    return None


def make_optimizer(
    training: TrainingOptions, groups: list[dict], device: torch.device
) -> tuple[torch.optim.Optimizer, bool]:
    """AdamW (fused where the device supports it), bitsandbytes' 8-bit AdamW, torchao's 8-bit or 4-bit AdamW, Prodigy,
    Adafactor or CAME, as the run's ``training`` section (``cfg.training``: --optimizer, the --adam_*, --prodigy_*,
    --adafactor_* and --came_* options, --use_8bit_adam) says; returns (optimizer, whether the guard skips its step on
    the device)."""
    kwargs = _AdamOptions(
        betas=(training.adam_beta1, training.adam_beta2),
        eps=training.adam_epsilon,
        weight_decay=training.adam_weight_decay,
    )
    if training.optimizer == "prodigy":
        # the guard drives it as fused AdamW (found_inf, a device learning rate): no host read (training/prodigy.py)
        return _prodigy(training, groups, kwargs), True
    if training.optimizer == "adafactor":  # the same interface (training/adafactor.py)
        from dit_lora.training.adafactor import DeviceAdafactor

        return DeviceAdafactor(
            groups,
            lr=training.learning_rate,
            clip_threshold=training.adafactor_clip_threshold,
            decay_rate=training.adafactor_decay_rate,
            beta1=training.adafactor_beta1,
            weight_decay=training.adam_weight_decay,
            scale_parameter=training.adafactor_scale_parameter,
        ), True
    if training.optimizer == "came":  # the same interface (training/came.py)
        from dit_lora.training.came import DeviceCAME

        return DeviceCAME(
            groups,
            lr=training.learning_rate,
            clip_threshold=training.came_clip_threshold,
            betas=(training.adam_beta1, training.adam_beta2, training.came_beta3),
            weight_decay=training.adam_weight_decay,
        ), True
    if training.optimizer in LOW_BIT:  # torchao's update, the same interface (training/lowbit_adam.py)
        return _low_bit(LOW_BIT[training.optimizer], groups, kwargs, training.learning_rate), True
    if training.use_8bit_adam:
        try:
            import bitsandbytes as bnb
        except Exception as err:
            raise UserError(
                f"--use_8bit_adam could not import bitsandbytes ({err}). Install it with `pip install 'dit-lora[quant]' -c constraints.txt` (bitsandbytes >= 0.49 runs on CUDA and on a CPU)."
            )
        return bnb.optim.AdamW8bit(groups, **kwargs), False
    # The fused kernel needs every parameter on one supported device in a floating dtype; master weights are fp32.
    fused = device.type in ("cuda", "cpu", "xpu", "mps")
    try:
        return torch.optim.AdamW(groups, fused=fused, **kwargs), fused
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kwargs), False


#: --optimizer's torchao AdamW choices: their bits per moment value
LOW_BIT = {"adamw8bit": 8, "adamw4bit": 4}


def _low_bit(bits: int, groups: list[dict], adam: _AdamOptions, lr: float) -> torch.optim.Optimizer:
    """:func:`~dit_lora.training.lowbit_adam.device_adamw` with the --adam_* options; without torchao one paragraph."""
    from dit_lora.training.lowbit_adam import device_adamw

    try:
        return device_adamw(bits, groups, lr=lr, **adam)
    except ImportError as err:
        raise UserError(
            f"--optimizer adamw{bits}bit could not import torchao ({err}). Install it with `pip install "
            "'dit-lora[quant]' -c constraints.txt` (torchao 0.18; its AdamW runs on CUDA and on a CPU)."
        ) from err


def _prodigy(training: TrainingOptions, groups: list[dict], adam: _AdamOptions) -> torch.optim.Optimizer:
    """:class:`~dit_lora.training.prodigy.DeviceProdigy` with diffusers' examples' arguments: the --adam_* betas,
    epsilon and weight decay, the --prodigy_* options."""
    from dit_lora.training.prodigy import DeviceProdigy

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
