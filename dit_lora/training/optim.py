"""Optimizer and learning-rate schedule construction."""

from __future__ import annotations

import torch

from dit_lora.core.errors import UserError


def make_optimizer(cfg, groups: list[dict], device: torch.device) -> tuple[torch.optim.Optimizer, bool]:
    """AdamW (fused where the device supports it) or bitsandbytes' 8-bit AdamW; returns (optimizer, fused?)."""
    kwargs = dict(betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon, weight_decay=cfg.adam_weight_decay)
    if cfg.use_8bit_adam:
        try:
            import bitsandbytes as bnb
        except Exception as err:
            raise UserError(f"--use_8bit_adam could not import bitsandbytes ({err}). Install it with `pip install 'dit-lora[quant]' -c constraints.txt` (bitsandbytes >= 0.49 runs on CUDA and on a CPU).")
        return bnb.optim.AdamW8bit(groups, **kwargs), False
    # The fused kernel needs every parameter on one supported device in a floating dtype; master weights are fp32.
    fused = device.type in ("cuda", "cpu", "xpu", "mps")
    try:
        return torch.optim.AdamW(groups, fused=fused, **kwargs), fused
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kwargs), False


def make_lr_scheduler(cfg, optimizer, max_steps: int):
    """A diffusers schedule stepped once per optimizer update (not once per process)."""
    from diffusers.optimization import get_scheduler

    return get_scheduler(
        cfg.lr_scheduler, optimizer=optimizer, num_warmup_steps=cfg.lr_warmup_steps, num_training_steps=max_steps,
        num_cycles=cfg.lr_num_cycles, power=cfg.lr_power,
    )


