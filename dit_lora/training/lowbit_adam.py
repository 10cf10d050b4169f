"""torchao's 8-bit and 4-bit AdamW (``torchao.optim.AdamW8bit`` and ``AdamW4bit``) with the guard's skip on the device.

Why this exists: the guard promises that a skipped step changes no parameter, moment, count or schedule, decided on
the device without a host sync (:mod:`.guard`). bitsandbytes' ``AdamW8bit`` (``--use_8bit_adam``) cannot keep it: it
takes its learning rate and step count as host numbers, so the guard reads its flag on the host every step. torchao's
low-bit AdamW computes with tensors only (its update, ``torchao.optim.adam.single_param_adam``, is one
``torch.compile(fullgraph=True)`` graph per parameter shape), but keeps each parameter's step count as a CPU tensor and
always applies the update. Here the update stays torchao's own compiled function, called as torchao calls it (tested
bitwise equal to ``torchao.optim.AdamW8bit``/``AdamW4bit`` step for step), and around it:

* the step count is a device tensor: incremented before the update, as torchao does, and decremented again on a
  skipped step (``step -= found_inf``);
* with the guard's ``found_inf`` set (the fused AdamW interface, :meth:`~.guard.StepGuard.optimizer_step`), each
  parameter's update is bracketed by a copy of what it writes (the parameter and its state's tensors: one parameter's
  worth at a time) and a ``torch.where(found_inf > 0, before, after)`` copied back, so a skipped step, NaN or Inf
  included, leaves every tensor as it was, the quantized moments' codes and block scales too;
* the learning rate is the group's tensor, which the guard replaces with its device-side schedule.

The state holds plain tensors: each quantized moment as its inner tensors (``exp_avg.codes``, ``exp_avg.scale``,
``exp_avg.qmap``; torchao's ``OptimState8bit``/``OptimState4bit`` are rebuilt around them, sharing their storage, for
each update), a moment torchao keeps unquantized (fewer than 4,096 values, or a size that is not a whole number of its
blocks) as itself. So the checkpoint's ``optimizer.bin`` (loaded with ``weights_only``), the guard's snapshot
(safetensors) and its rollback handle it as any optimizer's, and nothing is allow-listed for unpickling.

On a CPU, the host-sync audit cannot watch inside a compiled graph (Dynamo does not compile under its Python modes):
:func:`~.sync_audit.compiled_region` is that documented exception.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

import torch

from dit_lora.core import quiet
from dit_lora.training.guard import DeviceSkip
from dit_lora.training.sync_audit import compiled_region

#: torchao's moments: (state key, signed); amsgrad's maximum is unsigned too
_MOMENTS = (("exp_avg", True), ("exp_avg_sq", False), ("max_exp_avg_sq", False))
#: a quantized moment's inner tensors, as torchao's state subclasses name them (``tensor_attrs``)
_INNER = ("codes", "scale", "qmap")


def torchao_optimizers() -> tuple[type, type]:
    """torchao's ``(AdamW8bit, AdamW4bit)``, imported quietly (ImportError without torchao)."""
    quiet.install()  # its import's lines about extensions this torch cannot load (:mod:`dit_lora.core.quiet`)
    from torchao.optim import AdamW4bit, AdamW8bit

    # at the first compile: torchao's state classes lack a hash for AOT autograd's cache (each process traces its
    # graphs again; inductor's own cache still holds the kernels), which a user can do nothing about
    warnings.filterwarnings("ignore", message=r"OptimState[48]bit does not implement _stable_hash_for_caching")
    return AdamW8bit, AdamW4bit


def device_adamw(bits: int, params: Iterable[Any], **kwargs: Any) -> torch.optim.Optimizer:
    """A :class:`DeviceLowBitAdamW` over torchao's ``AdamW8bit`` (``bits`` 8) or ``AdamW4bit`` (``bits`` 4): keywords
    as torchao's (``lr``, ``betas``, ``eps``, ``weight_decay``, ``amsgrad``, ``block_size``, ...)."""
    return device_class(bits)(params, **kwargs)


@cache
def device_class(bits: int) -> type:
    """``DeviceAdamW8bit`` or ``DeviceAdamW4bit``: :class:`DeviceLowBitAdamW` mixed into torchao's class (made once)."""
    eight, four = torchao_optimizers()
    base = {8: eight, 4: four}[bits]
    return type(f"Device{base.__name__}", (DeviceLowBitAdamW, base), {"__doc__": DeviceLowBitAdamW.__doc__})


class DeviceLowBitAdamW(DeviceSkip):
    """torchao's low-bit AdamW (mixed in before it: :func:`device_adamw` builds the class) with the guard's skip
    (``found_inf``, the fused AdamW interface) and every count on the device; its state plain tensors (module
    docstring)."""

    # torchao's, from the class this is mixed into
    param_groups: list[dict[str, Any]]
    state: dict[Any, dict[str, Any]]
    block_size: int
    bf16_stochastic_round: bool
    is_adamw: bool

    _new_buffer: Callable[[torch.Tensor, bool], torch.Tensor]  # a zero moment, quantized where torchao quantizes

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient, each as torchao's; none when ``found_inf`` is set."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        from torch._dynamo.utils import disable_cache_limit

        skips: dict[torch.device, torch.Tensor] = {}
        with disable_cache_limit():  # as torchao: one graph per parameter shape and dtype, a fixed number
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.device not in skips and self.found_inf is not None:
                        skips[p.device] = self.found_inf.to(p.device, torch.float32).reshape(())
                    self._step_param(group, p, skips.get(p.device))
        return loss

    def _state(self, p: torch.Tensor, group: dict) -> dict[str, torch.Tensor]:
        """``p``'s state, made at its first step as torchao makes it (its ``_new_buffer`` decides which moments are
        quantized), held as plain tensors, the step count on ``p``'s device."""
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            for name, signed in _MOMENTS:
                if name == "max_exp_avg_sq" and not group["amsgrad"]:
                    continue
                buffer = self._new_buffer(p, signed)
                if type(buffer) is torch.Tensor:
                    state[name] = buffer
                else:
                    state.update({f"{name}.{k}": getattr(buffer, k) for k in _INNER})
        return state

    def _moment(self, state: dict, p: torch.Tensor, name: str, signed: bool) -> torch.Tensor | None:
        """The moment ``name`` as torchao's update takes it: the plain tensor, or its state subclass rebuilt around
        the inner tensors (their storage: the update writes them in place); None when not kept."""
        if name in state:
            return state[name]
        if f"{name}.codes" not in state:
            return None
        codes, scale, qmap = (state[f"{name}.{k}"] for k in _INNER)
        from torchao.optim.subclass_4bit import OptimState4bit
        from torchao.optim.subclass_8bit import OptimState8bit

        if codes.numel() * 2 == p.numel():  # two 4-bit codes a byte
            return OptimState4bit(codes, scale, qmap, signed, p.shape, dtype=p.dtype)
        return OptimState8bit(codes, scale, qmap, signed, dtype=p.dtype)

    def _step_param(self, group: dict, p: torch.Tensor, skip: torch.Tensor | None) -> None:
        """torchao's update of ``p`` (``single_param_adam``, compiled as torchao compiles it), undone on the device
        when ``skip`` (the guard's flag on ``p``'s device) is 1."""
        from torchao.optim.adam import single_param_adam

        assert p.grad is not None  # only parameters with a gradient are stepped
        if p.grad.is_sparse:
            raise RuntimeError("Sparse gradient is not supported")
        if not isinstance(group["lr"], torch.Tensor):
            raise RuntimeError("the learning rate must stay a tensor (torchao's update reads it as one)")
        state = self._state(p, group)
        moments = [self._moment(state, p, name, signed) for name, signed in _MOMENTS]
        written = [p.detach(), *(v for k, v in state.items() if k != "step")]
        before = [t.clone() for t in written] if skip is not None else []
        state["step"] += 1
        graph = torch.compile(single_param_adam, fullgraph=True, dynamic=False)
        with compiled_region(p, p.grad, state["step"], group["lr"], *written[1:]):
            graph(
                p.detach(), p.grad, state["step"], *moments, group["lr"], group["betas"][0], group["betas"][1],
                group["weight_decay"], group["eps"], self.is_adamw,
                self.bf16_stochastic_round and p.dtype is torch.bfloat16,
            )  # fmt: skip
        if skip is not None:
            undo = skip > 0
            for after, kept in zip(written, before, strict=True):
                after.copy_(torch.where(undo, kept, after))
            state["step"] -= skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's load for the groups; the state placed on each parameter's device with its own dtypes (torch's
        policy would cast every tensor to the parameter's dtype: the codes are uint8, the scales fp32)."""
        super().load_state_dict({**state_dict, "state": {}})  # type: ignore[misc]
        saved = state_dict["state"]
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for i, p in zip(ids, params, strict=True):
            if i in saved:
                self.state[p] = {k: v.to(device=p.device, copy=True) for k, v in saved[i].items()}
