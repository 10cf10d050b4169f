"""CAME (Luo et al., 2023: "Confidence-guided Adaptive Memory Efficient Optimization") as ``came_pytorch.CAME`` steps
it, its counts on the device, so the guard can skip a step without asking the host.

came-pytorch (the CAME OneTrainer offers, and sd-scripts' ``--optimizer_type came_pytorch.CAME``) keeps each
parameter's step count as a Python integer and steps every parameter it is given: a guarded run could neither skip
its step without a sync nor undo its count. This is the same update, tested equal to came-pytorch's to the bit, step
for step, on a CPU (tests/training/test_came.py): the learning rate is the run's (``--learning_rate`` and its
schedule, a device tensor the guard sets), each parameter's ``step`` a device tensor. It takes the fused AdamW
interface the guard drives (:meth:`~dit_lora.training.guard.StepGuard.optimizer_step`): ``found_inf`` set to 1 makes
the step change nothing (parameters, first moment, factored second moments and instabilities, counts).

CAME is Adafactor's factored second moment with a first moment, and a second factored estimate, of the instability
(how far each update is from the first moment), that scales the first moment into the step: a 2-D weight of shape
(m, n) keeps a row and a column of second moments and a row and a column of instabilities (2 (m + n) values), plus a
first moment of its own size. A 1-D weight keeps a full second moment and steps by its first moment alone.
came-pytorch also keeps each weight's root mean square (``RMS``), which no update reads; this one does not compute it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from dit_lora.training.guard import DeviceSkip


class DeviceCAME(DeviceSkip, torch.optim.Optimizer):
    """came-pytorch's ``CAME`` with the guard's skip (``found_inf``) and no host read. ``betas``: the decays of the
    first moment, of the second moments and of the instabilities; ``eps``: (the second moments' floor, the
    instabilities' floor)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        eps: tuple[float, float] = (1e-30, 1e-16),
        clip_threshold: float = 1.0,
        betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
        weight_decay: float = 0.0,
    ) -> None:
        if not all(0.0 <= beta <= 1.0 for beta in betas):
            raise ValueError(f"CAME's betas are decays in [0, 1], not {betas}")
        defaults = dict(lr=lr, eps=eps, clip_threshold=clip_threshold, betas=betas, weight_decay=weight_decay)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        """One CAME update of every parameter with a gradient, or none when ``found_inf`` is set.

        A skipped step reads its gradients as zeros (NaN, Inf or overflowing squares x 0 would not be 0); each
        running average's increment is then scaled by ``keep`` (1, or 0 on a skipped step) and its decay replaced by
        1, so every tensor stays as it was. The gradients themselves are left as they are."""
        loss = closure() if closure is not None else None
        shared: dict = {}  # per device: what every parameter's update reads (made once a step)
        for group in self.param_groups:
            scalars: dict = {}  # per device: the group's decays and learning rate (made once a step)
            for p in group["params"]:
                if p.grad is not None:
                    if p.device not in shared:
                        shared[p.device] = self.keep_flags(p.device)
                    if p.device not in scalars:
                        scalars[p.device] = _group_scalars(group, p.device, shared[p.device][1])
                    self._step_param(group, p, shared[p.device], *scalars[p.device])
        return loss

    def _state(self, p: torch.Tensor, grad: torch.Tensor) -> dict:
        """``p``'s state, made at its first step as came-pytorch makes it (a resumed state brings its own)."""
        state = self.state[p]
        if not state:
            shape = grad.shape
            state["step"] = torch.zeros((), device=p.device, dtype=torch.float64)
            state["exp_avg"] = torch.zeros_like(grad)
            if len(shape) >= 2:  # factored: a row and a column of second moments, and of instabilities
                for name in ("exp_avg_sq", "exp_avg_res"):
                    state[f"{name}_row"] = torch.zeros(shape[:-1], dtype=grad.dtype, device=grad.device)
                    state[f"{name}_col"] = torch.zeros(shape[:-2] + shape[-1:], dtype=grad.dtype, device=grad.device)
            else:
                state["exp_avg_sq"] = torch.zeros_like(grad)
        return state

    def _step_param(self, group: dict, p: torch.Tensor, keeps, decays: list, lr: torch.Tensor) -> None:
        """``p`` updated in place (unchanged when ``keeps`` is (0, False): the guard skips the step) at the group's
        learning rate ``lr`` (a device tensor), came-pytorch's arithmetic; ``decays``: the betas, or 1s on a skipped
        step."""
        assert p.grad is not None  # only parameters with a gradient are stepped
        keep, kept = keeps
        beta1, beta2, beta3 = group["betas"]
        grad = p.grad.float() if p.grad.dtype in (torch.float16, torch.bfloat16) else p.grad
        state = self._state(p, grad)
        master = p.float() if p.dtype in (torch.float16, torch.bfloat16) else p
        # A skipped step's gradient may be NaN, Inf or finite but squaring to Inf (unclipped): what it feeds is
        # zeroed by where (x 0 would leave NaN), on the row and column means, then on the update (one pass of the
        # weight's size); a kept step's values pass unchanged (NaN stays NaN without the guard, as in AdamW), so
        # it is came-pytorch's step to the bit. Each decay is 1 when skipped.
        squared = grad**2 + group["eps"][0]
        if "exp_avg_sq_row" in state:
            row, col = _decayed(state, "exp_avg_sq", squared, decays[1], kept, 1 - beta2)
            update = _approx(row, col).mul_(grad)
        else:
            second = state["exp_avg_sq"]
            second.mul_(decays[1]).add_(torch.where(kept, squared, 0.0), alpha=1 - beta2)
            update = second.rsqrt().mul_(grad)
        update.div_((_rms(update) / group["clip_threshold"]).clamp_(min=1.0))
        update = torch.where(kept, update, 0.0)  # also a first step skipped: its second moments empty, 0/0
        first = state["exp_avg"]
        first.mul_(decays[0]).add_(update, alpha=1 - beta1)
        if "exp_avg_res_row" in state:  # the confidence: the instability's factored average scales the first moment
            instability = (update - first) ** 2 + group["eps"][1]
            row, col = _decayed(state, "exp_avg_res", instability, decays[2], kept, 1 - beta3)
            update = _approx(row, col, kept).mul_(first)  # 0 when skipped (first step: empty instabilities, 0/0)
        else:
            update = first * keep
        if group["weight_decay"] != 0:
            master.addcmul_(master, -group["weight_decay"] * lr * keep)  # came-pytorch's p + (-wd lr) p, to the bit
        master.sub_(update.mul_(lr))
        if master is not p:
            p.copy_(master)
        state["step"] = state["step"] + keep


def _group_scalars(group: dict, device: torch.device, kept: torch.Tensor) -> tuple[list, torch.Tensor]:
    """The group's three decays (its betas, or 1s when ``kept`` is False: a skipped step) and its learning rate
    (a float, or the device tensor the guard sets: float64), as tensors on ``device``."""
    decays = [torch.where(kept, beta, 1.0) for beta in group["betas"]]
    return decays, torch.as_tensor(group["lr"], device=device, dtype=torch.float64)


def _decayed(state: dict, name: str, value: torch.Tensor, decay, kept, rate: float):
    """``state``'s factored running average ``name`` (its ``_row`` and ``_col``) of ``value``'s row and column means,
    decayed by ``decay`` and moved by ``rate`` of them (of zeros when ``kept`` is False), in place; returns (row,
    column)."""
    row, col = state[f"{name}_row"], state[f"{name}_col"]
    row.mul_(decay).add_(torch.where(kept, value.mean(dim=-1), 0.0), alpha=rate)
    col.mul_(decay).add_(torch.where(kept, value.mean(dim=-2), 0.0), alpha=rate)
    return row, col


def _approx(row: torch.Tensor, col: torch.Tensor, kept: torch.Tensor | None = None) -> torch.Tensor:
    """The reciprocal square root of the full average that ``row`` and ``col`` factor, as came-pytorch (and
    Adafactor) approximate it; zeros when ``kept`` is False (each factor zeroed: they are a row and a column)."""
    r_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
    c_factor = col.unsqueeze(-2).rsqrt()
    if kept is not None:
        r_factor, c_factor = torch.where(kept, r_factor, 0.0), torch.where(kept, c_factor, 0.0)
    return torch.mul(r_factor, c_factor)


def _rms(tensor: torch.Tensor) -> torch.Tensor:
    """The root mean square of ``tensor`` (a device scalar), as came-pytorch computes it."""
    return tensor.norm(2) / (tensor.numel() ** 0.5)
