"""Prodigy (Mishchenko and Defazio, 2023) with its step-size estimate on the device, so the guard can skip a step
without asking the host.

``prodigyopt`` (the package diffusers' examples use) reads its D estimate back to the host for every parameter each
step (``.item()``) and keeps it and the step count as Python numbers: a guarded run could neither skip its step
without a sync nor undo the estimate's update. This is the same algorithm, tested equal to ``prodigyopt.Prodigy``
step for step (tests/training/test_prodigy.py), with every number a device tensor: the group's ``d``, ``d_max``,
``d_numerator`` and ``k``, each parameter's ``s``, ``p0`` and moments. It takes the fused AdamW interface the guard
already drives (:meth:`~dit_lora.training.guard.StepGuard.optimizer_step`): ``found_inf`` set to 1 makes the step
change nothing (parameters, moments, estimate, counts), and a group's ``lr`` may be a device tensor (the guard's
schedule). Differences, on purpose: groups may have different learning rates (LoRA+, a trained backbone: each group
steps with its own ``lr`` times ``d``; prodigyopt refuses that), and ``p0`` is always the parameter's copy (prodigyopt
keeps a zero scalar for an all-zero parameter, reading it on the host; the arithmetic is the same).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from dit_lora.training.guard import DeviceSkip

#: the group's scalars, device tensors (float64 on the parameters' device)
_SCALARS = ("d", "d_max", "d_numerator", "k")


class DeviceProdigy(DeviceSkip, torch.optim.Optimizer):
    """``prodigyopt.Prodigy``'s update with the guard's skip (``found_inf``) and no host read. Arguments as
    prodigyopt's (``lr`` is Prodigy's multiplier: leave it near 1.0)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1.0,
        betas: tuple[float, float] = (0.9, 0.999),
        beta3: float | None = None,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decouple: bool = True,
        use_bias_correction: bool = False,
        safeguard_warmup: bool = False,
        d0: float = 1e-6,
        d_coef: float = 1.0,
        growth_rate: float = float("inf"),
        slice_p: int = 1,
    ) -> None:
        defaults = dict(
            lr=lr, betas=betas, beta3=beta3, eps=eps, weight_decay=weight_decay, decouple=decouple,
            use_bias_correction=use_bias_correction, safeguard_warmup=safeguard_warmup, d0=d0, d_coef=d_coef,
            growth_rate=growth_rate, slice_p=slice_p,
        )  # fmt: skip
        super().__init__(params, defaults)
        for group in self.param_groups:  # now, not at the first step: the guard's first snapshot holds them
            if group["params"]:
                self._scalars(group, group["params"][0].device)

    def _scalars(self, group: dict, device: torch.device) -> None:
        """The group's estimate as device tensors, made at the first step (a resumed state brings its own)."""
        for name, start in zip(_SCALARS, (group["d0"], group["d0"], 0.0, 0.0), strict=True):
            value = group.get(name)
            if not isinstance(value, torch.Tensor):
                # float64, as prodigyopt's Python floats: the estimate sums many small terms
                group[name] = torch.tensor(float(start if value is None else value), device=device, dtype=torch.float64)

    @torch.no_grad()
    def step(self, closure=None):
        """One Prodigy update of every group, or none when ``found_inf`` is set (see the module docstring).

        In place, as prodigyopt: each increment is scaled by ``keep`` (1, or 0 on a skipped step) and each decay by
        its factor or 1, so a skipped step leaves every tensor as it was; a skipped step's gradients (NaN or Inf)
        are zeroed in place first, as 0 x NaN would not be 0. Gradients are consumed by the step either way."""
        loss = closure() if closure is not None else None
        live = [(g, [p for p in g["params"] if p.grad is not None]) for g in self.param_groups]
        live = [(g, ps) for g, ps in live if ps]
        if not live:
            return loss
        device = live[0][1][0].device
        for group, _ in live:
            self._scalars(group, device)
        first = self.param_groups[0]
        beta1, beta2 = first["betas"]
        beta3 = first["beta3"] if first["beta3"] is not None else math.sqrt(beta2)
        d, d_max, k, d0 = first["d"], first["d_max"], first["k"], first["d0"]
        keep, _ = self.keep_flags(device)
        bias = ((1 - beta2 ** (k + 1)) ** 0.5) / (1 - beta1 ** (k + 1)) if first["use_bias_correction"] else 1.0
        numerator = first["d_numerator"] * beta3
        sums, stepped = [], []
        # each decay, or 1 on a skipped step (from Python numbers: no tensor is copied to the device per step)
        decays = {b: torch.where(keep > 0, b, 1.0) for b in (beta1, beta2, beta3)}
        for group, params in live:
            dlr = d * torch.as_tensor(group["lr"], device=device, dtype=torch.float64) * bias
            rate = d if group["safeguard_warmup"] else dlr
            scales = {"s": (d / d0) * rate * keep, "sq": d * d * (1 - beta2) * keep, "avg": d * (1 - beta1) * keep}
            terms = [self._moments(group, p, keep, scales, decays, (beta1, beta2, beta3)) for p in params]
            numerator = numerator + (d / d0) * dlr * torch.stack([t for t, _ in terms]).sum()
            sums += [s for _, s in terms]
            stepped += [(group, p, dlr) for p in params]
        denominator = torch.stack(sums).sum()
        d_hat = first["d_coef"] * numerator / denominator
        grown = torch.where(d == d0, torch.maximum(d, d_hat), d)
        new_max = torch.maximum(d_max, d_hat)
        new_d = torch.minimum(new_max, grown * first["growth_rate"])
        frozen = (keep == 0) | (denominator == 0)  # prodigyopt: the moments move, the rest waits for a gradient
        moves = (~frozen).to(torch.float64)
        step_d = torch.where(frozen, d, new_d)  # a frozen step's estimate may be 0/0: x 0 it would still be NaN
        for group, p, dlr in stepped:
            self._step_param(group, p, dlr * moves, step_d, moves)
        for group, _ in live:
            group["d"] = torch.where(frozen, group["d"], new_d)
            group["d_max"] = torch.where(frozen, group["d_max"], new_max)
            group["d_numerator"] = torch.where(frozen, group["d_numerator"], numerator)
            group["k"] = group["k"] + moves
        return loss

    def _moments(self, group: dict, p: torch.Tensor, keep, scales: dict, decays: dict, betas) -> tuple:
        """``p``'s moments and ``s`` updated in place (``scales`` and ``decays`` hold ``keep``: unchanged on a skipped
        step); returns its term of the estimate's numerator (the gradient's product with ``p0 - p``) and the sum of
        its ``|s|``."""
        beta1, beta2, beta3 = betas
        state, grad = self.state[p], p.grad
        assert grad is not None  # only parameters with a gradient are stepped
        slice_p = group["slice_p"]
        if not state:
            state["step"] = torch.zeros((), device=p.device)
            state["s"] = torch.zeros_like(p.detach().flatten()[::slice_p])
            state["p0"] = p.detach().flatten()[::slice_p].clone()
            if beta1 > 0:
                state["exp_avg"] = torch.zeros_like(p.detach())
            state["exp_avg_sq"] = torch.zeros_like(p.detach())
        grad.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)  # finite whenever the step is kept (the guard's flag)
        if group["weight_decay"] != 0 and not group["decouple"]:
            grad.add_(p.detach(), alpha=group["weight_decay"])
        sliced = grad.flatten()[::slice_p]
        term = torch.dot(sliced, state["p0"] - p.detach().flatten()[::slice_p]) * keep
        state["s"].mul_(decays[beta3]).add_(sliced * scales["s"])
        state["exp_avg_sq"].mul_(decays[beta2]).addcmul_(grad, grad * scales["sq"])
        if beta1 > 0:
            state["exp_avg"].mul_(decays[beta1]).add_(grad * scales["avg"])
        return term, state["s"].abs().sum()

    def _step_param(self, group: dict, p: torch.Tensor, dlr, new_d, moves) -> None:
        """``p`` stepped in place by ``dlr`` (0 when the step is skipped or waits: then unchanged)."""
        state = self.state[p]
        denom = state["exp_avg_sq"].sqrt().add_(new_d * group["eps"])
        if group["weight_decay"] != 0 and group["decouple"]:
            p.mul_(1 - group["weight_decay"] * dlr)
        direction = state["exp_avg"] if "exp_avg" in state else p.grad * new_d
        p.addcmul_(direction.div(denom), -dlr)  # addcdiv's order: the quotient, then its scale
        state["step"] = state["step"] + moves
