"""Optimizer and learning-rate schedule construction (and their JSON-safe schedule state)."""

from __future__ import annotations

from typing import Any

import torch

from ..errors import UserError


def make_optimizer(cfg, groups: list[dict], device: torch.device) -> tuple[torch.optim.Optimizer, bool]:
    """AdamW (fused where the device supports it) or bitsandbytes' 8-bit AdamW; returns (optimizer, fused?)."""
    kwargs = dict(betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon, weight_decay=cfg.adam_weight_decay)
    if cfg.use_8bit_adam:
        try:
            import bitsandbytes as bnb
        except Exception as err:
            raise UserError(f"--use_8bit_adam could not import bitsandbytes ({err}). Install `dit-lora[quant]` on a CUDA machine.")
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


def scheduler_state(scheduler) -> dict[str, Any]:
    """The schedule's state without its lambdas (functions are rebuilt from the config)."""
    return {k: v for k, v in scheduler.state_dict().items() if k != "lr_lambdas"}


def load_scheduler_state(scheduler, state: dict[str, Any]) -> None:
    """Restore what :func:`scheduler_state` saved."""
    full = scheduler.state_dict()
    full.update(state)
    full["lr_lambdas"] = [None] * len(scheduler.optimizer.param_groups)
    scheduler.load_state_dict(full)
