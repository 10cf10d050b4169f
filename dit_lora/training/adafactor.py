"""Adafactor (Shazeer and Stern, 2018) as ``transformers.optimization.Adafactor`` steps it with a fixed learning rate,
its counts and scales on the device, so the guard can skip a step without asking the host.

transformers' Adafactor (the one sd-scripts, musubi-tuner, ai-toolkit and SimpleTuner offer) keeps each parameter's
step count as a Python integer and, with ``scale_parameter``, compares the parameter's RMS with a Python number: a
guarded run could neither skip its step without a sync nor undo its count. This is the same update, tested equal to
transformers' step for step (tests/training/test_adafactor.py), with ``relative_step=False`` and
``warmup_init=False``, the settings those trainers advise for a LoRA: the learning rate is the run's (``--learning_rate``
and its schedule, a device tensor the guard sets), not Adafactor's own ``1/sqrt(step)``. Each parameter's ``step``
and ``RMS`` are device tensors. It takes the fused AdamW interface the guard drives
(:meth:`~dit_lora.training.guard.StepGuard.optimizer_step`): ``found_inf`` set to 1 makes the step change nothing
(parameters, factored second moments, first moment, counts).

Its state is small: a 2-D weight of shape (m, n) keeps a row and a column of second moments (m + n values, not m x n),
plus a first moment of its own size only with ``beta1``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from dit_lora.training.guard import DeviceSkip


class DeviceAdafactor(DeviceSkip, torch.optim.Optimizer):
    """transformers' ``Adafactor(relative_step=False, warmup_init=False)`` with the guard's skip (``found_inf``) and
    no host read. ``eps``: (the second moments' floor, the parameter-scale floor); ``beta1`` None keeps no first
    moment (Adafactor's default)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        eps: tuple[float, float] = (1e-30, 1e-3),
        clip_threshold: float = 1.0,
        decay_rate: float = -0.8,
        beta1: float | None = None,
        weight_decay: float = 0.0,
        scale_parameter: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr, eps=eps, clip_threshold=clip_threshold, decay_rate=decay_rate, beta1=beta1,
            weight_decay=weight_decay, scale_parameter=scale_parameter,
        )  # fmt: skip
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        """One Adafactor update of every parameter with a gradient, or none when ``found_inf`` is set.

        A skipped step reads its gradients as zeros (NaN, Inf or overflowing squares x 0 would not be 0); each
        increment is then scaled by ``keep`` (1, or 0 on a skipped step) and each decay replaced by 1, so every tensor
        stays as it was. The gradients themselves are left as they are."""
        loss = closure() if closure is not None else None
        shared: dict = {}  # per device: what every parameter's update reads (made once a step)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if p.device not in shared:
                        shared[p.device] = self.keep_flags(p.device)
                    keep, kept = shared[p.device]
                    lr = torch.as_tensor(group["lr"], device=p.device, dtype=torch.float64)
                    self._step_param(group, p, keep, kept, lr)
        return loss

    def _state(self, p: torch.Tensor, grad: torch.Tensor, group: dict) -> dict:
        """``p``'s state, made at its first step as transformers makes it (a resumed state brings its own)."""
        state = self.state[p]
        if not state:
            shape = grad.shape
            state["step"] = torch.zeros((), device=p.device, dtype=torch.float64)
            if group["beta1"] is not None:
                state["exp_avg"] = torch.zeros_like(grad)
            if len(shape) >= 2:  # factored: a row and a column of second moments
                state["exp_avg_sq_row"] = torch.zeros(shape[:-1], dtype=grad.dtype, device=grad.device)
                state["exp_avg_sq_col"] = torch.zeros(shape[:-2] + shape[-1:], dtype=grad.dtype, device=grad.device)
            else:
                state["exp_avg_sq"] = torch.zeros_like(grad)
            state["RMS"] = torch.zeros((), device=p.device, dtype=grad.dtype)
        return state

    def _step_param(self, group: dict, p: torch.Tensor, keep, kept, lr) -> None:
        """``p`` updated in place (unchanged when ``keep`` is 0 and ``kept`` False: the guard skips the step) at the
        group's learning rate ``lr`` (a device tensor), transformers' arithmetic."""
        assert p.grad is not None  # only parameters with a gradient are stepped
        grad = p.grad.float() if p.grad.dtype in (torch.float16, torch.bfloat16) else p.grad
        # a skipped step's gradient may be NaN, Inf or finite but squaring to Inf (unclipped): x 0 it would not be
        # 0, so it reads as zeros; a kept step's is the run's own (NaN stays NaN without the guard, as in AdamW)
        grad = torch.where(kept, grad, 0.0)
        state = self._state(p, grad, group)
        master = p.float() if p.dtype in (torch.float16, torch.bfloat16) else p
        step = state["step"] + keep
        if group["scale_parameter"]:  # transformers keeps the RMS either way; only this reads it
            state["RMS"] = torch.where(kept, _rms(master), state["RMS"])
            lr = lr * torch.clamp(state["RMS"].double(), min=group["eps"][1])
        # step ** decay_rate for the step kept; on a skipped one the decay is 1 and the increment 0 (the count
        # stays, so a first step skipped stays a first step: 1 - 0 ** -0.8 would be -inf)
        beta2t = torch.where(kept, 1.0 - torch.clamp(step, min=1.0) ** group["decay_rate"], 1.0)
        rate = (1.0 - beta2t) * keep
        squared = grad**2 + group["eps"][0]
        if "exp_avg_sq_row" in state:
            row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
            row.mul_(beta2t).add_(squared.mean(dim=-1) * rate)
            col.mul_(beta2t).add_(squared.mean(dim=-2) * rate)
            r_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
            update = torch.mul(r_factor, col.unsqueeze(-2).rsqrt()).mul_(grad)
        else:
            second = state["exp_avg_sq"]
            second.mul_(beta2t).add_(squared * rate)
            update = second.rsqrt().mul_(grad)
        update.div_((_rms(update) / group["clip_threshold"]).clamp_(min=1.0))
        # where, not x keep: a first step skipped has empty second moments, and its update 0/0
        update = torch.where(kept, update.mul_(lr), 0.0)
        if group["beta1"] is not None:
            first = state["exp_avg"]
            first.mul_(torch.where(kept, group["beta1"], 1.0)).add_(update * (1 - group["beta1"]))
            update = first * keep
        if group["weight_decay"] != 0:
            master.add_(master * (-group["weight_decay"] * lr * keep))
        master.sub_(update)
        if master is not p:
            p.copy_(master)
        state["step"] = step


def _rms(tensor: torch.Tensor) -> torch.Tensor:
    """The root mean square of ``tensor`` (a device scalar), as transformers computes it."""
    return tensor.norm(2) / (tensor.numel() ** 0.5)
