"""The kernels' runtime: which implementation each op uses, and the sampled checks that can switch one off.

Every patched module calls its op through :meth:`KernelRuntime.call` with the fast
implementation and the PyTorch reference. Normally that is one dictionary lookup and the fast
call: no host sync, no extra work. On a check step (the first step of a run, then every
``check_interval`` steps) the runtime keeps a copy of one call's live inputs per op, picked
uniformly among that step's calls, and after the backward :meth:`finish_check` reruns both
implementations on them, forward and backward with the same cotangent. An op whose output or
gradients are non-finite where the reference's are finite, or differ beyond tolerance, is switched
off for the rest of the run (attention moves to a safer backend), all processes agree on it, and
the step that used it is skipped. That comparison reads values on the host, so it happens only
on check steps.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dit_lora.kernels.attention import (
    AttentionBackend,
    attention,
    attention_reference,
    fallback_backend,
    restore_backend,
)
from dit_lora.kernels.tolerance import check_call

logger = logging.getLogger("dit_lora.kernels")

_ATTENTION_SLICE_HEADS = (
    1  # attention checks run on one sample, one head: the fp32 N^2 reference is ~1.3 GB at 17.8k tokens
)


@dataclass
class _Capture:
    fast: Callable
    reference: Callable
    args: tuple
    autocast: tuple[str, bool, torch.dtype]
    calls: int = 0
    needs_grad: tuple[bool, ...] = ()


@dataclass
class KernelRuntime:
    """Per-model kernel state: implementation choices, checks, and the record of fallbacks."""

    device: torch.device
    attention_backend: AttentionBackend | None = None
    check_interval: int = 0
    enabled: dict[str, bool] = field(default_factory=dict)
    impl: dict[str, str] = field(default_factory=dict)  # kernel -> triton | compiled | eager
    notes: list[str] = field(default_factory=list)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    checks: int = 0
    inconclusive: int = 0
    _armed: bool = False
    _captures: dict[str, _Capture] = field(default_factory=dict)
    _rng: random.Random = field(default_factory=lambda: random.Random(0))

    ops: dict[str, tuple[Callable, Callable]] = field(default_factory=dict)  # kernel -> (fast, reference)

    def __post_init__(self) -> None:
        self.ops.setdefault("attention", (self._fast_attention, attention_reference))

    # ---- the hot path ------------------------------------------------------------------
    def call(self, name: str, *args):
        """Run op ``name`` on ``args``: its fast implementation while enabled, else its PyTorch reference."""
        fast, reference = self.ops[name]
        if not self.enabled.get(name, False):
            return reference(*args)
        if torch.compiler.is_compiling():
            # Inside a --compile region inductor fuses the PyTorch reference itself (a Triton launcher or the
            # check's host-side capture would break the graph); check steps run eagerly and see the fast op.
            return fast(*args) if name == "attention" else reference(*args)
        if self._armed and torch.is_grad_enabled():
            self._capture(name, fast, reference, args)
        return fast(*args)

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Softmax attention of (B, H, N, D) tensors on the run's current backend."""
        return self.call("attention", q, k, v, mask)

    def _fast_attention(self, q, k, v, mask):
        return attention(q, k, v, mask, self.attention_backend)

    # ---- checks ------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        """Whether update ``step`` is a check step: the run's first, then every ``check_interval``.

        A function of the step alone, so a resumed run checks exactly where an uninterrupted one does
        (what failed before the checkpoint is restored with :meth:`load_state_dict`).
        """
        if not any(self.enabled.values()):
            return False
        return step == 1 or (self.check_interval > 0 and step % self.check_interval == 0)

    def arm(self, step: int) -> None:
        """Start capturing inputs for this step's check."""
        self._armed = True
        self._captures.clear()
        self._rng.seed(step)

    def _capture(self, name: str, fast: Callable, reference: Callable, args: tuple) -> None:
        cap = self._captures.get(name)
        if cap is None:
            cap = self._captures[name] = _Capture(fast, reference, (), ("cpu", False, torch.float32))
        cap.calls += 1
        if self._rng.random() * cap.calls >= 1.0:  # reservoir sampling: each call kept with probability 1/calls
            return
        if name == "attention":
            args = _attention_slice(args)
        cap.args = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
        # Gradients are compared only for what needs them in the model (never a mask or a constant).
        cap.needs_grad = tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        device_type = self.device.type
        cap.autocast = (device_type, torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type))

    def finish_check(self, step: int) -> bool:
        """Compare the captured calls against their references; switch off what fails. True if any failed.

        Reads values on the host (a sync): call it only on check steps, after the backward.
        """
        self._armed = False
        names = sorted(n for n in self.enabled if self.enabled[n])
        reasons: dict[str, str] = {}
        for name in names:
            cap = self._captures.get(name)
            if cap is None or not cap.args:
                continue
            verdict = _compare(cap, seed=step)
            if verdict == "inconclusive":
                self.inconclusive += 1
            elif verdict:
                reasons[name] = verdict
        self._captures.clear()
        self.checks += 1
        failed = _agree_across_processes(names, reasons, self.device)
        for name in failed:
            self._switch_off(name, step, reasons.get(name, "its check failed on another process"))
        return bool(failed)

    def _switch_off(self, name: str, step: int, reason: str) -> None:
        record: dict[str, Any] = {"kernel": name, "step": step, "reason": reason}
        if name == "attention" and self.attention_backend is not None:
            old = self.attention_backend
            self.attention_backend = fallback_backend(old, self.device)
            record.update({"from": old.name, "to": self.attention_backend.name})
            message = (
                f"kernel check at step {step}: attention on {old.name} {reason}; switched to "
                f"{self.attention_backend.name} for the rest of the run"
            )
        else:
            self.enabled[name] = False
            record.update({"from": self.impl.get(name, "triton"), "to": "reference"})
            message = (
                f"kernel check at step {step}: the {name} kernel {reason}; switched off for the rest "
                "of the run (its PyTorch reference runs instead)"
            )
        self.fallbacks.append(record)
        logger.warning(message)
        print(f"warning: {message}", flush=True)

    def _implementation(self, name: str) -> str:
        if not self.enabled.get(name):
            return "reference"
        if name == "attention" and self.attention_backend is not None:
            return self.attention_backend.name
        return self.impl.get(name, "triton")

    # ---- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-safe run state: which ops are on, the attention backend now, fallbacks and check counts."""
        return {
            "enabled": dict(self.enabled),
            "attention_backend": None if self.attention_backend is None else self.attention_backend.name,
            "fallbacks": list(self.fallbacks),
            "checks": self.checks,
            "inconclusive": self.inconclusive,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: ops switched off before the checkpoint stay off after a resume."""
        for name, on in state["enabled"].items():
            if name in self.enabled:
                self.enabled[name] = self.enabled[name] and on
        if self.attention_backend is not None and state["attention_backend"]:
            self.attention_backend = restore_backend(self.attention_backend, state["attention_backend"])
        self.fallbacks = list(state["fallbacks"])
        self.checks, self.inconclusive = int(state["checks"]), int(state["inconclusive"])

    def summary(self, counts: dict[str, int]) -> dict[str, Any]:
        """What train_summary.json records about the kernels."""
        return {
            "patched": dict(counts),
            "implementations": {name: self._implementation(name) for name in sorted(self.enabled)},
            "attention_backend": None if self.attention_backend is None else self.attention_backend.name,
            "check_interval": self.check_interval,
            "checks": self.checks,
            "inconclusive_checks": self.inconclusive,
            "fallbacks": list(self.fallbacks),
            "notes": list(self.notes),
        }


def install_sample_mixing_modulate(rt: KernelRuntime) -> bool:
    """``--inject_faults broken_kernel``: the modulate op uses sample 0's scale and shift for every sample.

    That is OpenDiT's fused-kernel bug; the first kernel check must catch it. False when the modulate
    op is not patched (nothing to break).
    """
    if not rt.enabled.get("modulate"):
        return False
    fast, reference = rt.ops["modulate"]

    def sample_mixing_modulate(x, weight, bias, scale, shift, eps):
        if scale is not None:
            scale, shift = scale[:1].expand_as(scale), shift[:1].expand_as(shift)
        return fast(x, weight, bias, scale, shift, eps)

    rt.ops["modulate"] = (sample_mixing_modulate, reference)
    return True


def _attention_slice(args: tuple) -> tuple:
    q, k, v, mask = args
    h = _ATTENTION_SLICE_HEADS
    if mask is not None:
        mask = mask[:1, :h] if mask.dim() == 4 else mask[:1]
    return q[:1, :h], k[:1, :h], v[:1, :h], mask


def _compare(cap: _Capture, seed: int) -> str:
    """'' when the fast path agrees with its reference, 'inconclusive' or a reason otherwise."""
    return check_call(cap.fast, cap.reference, cap.args, cap.needs_grad, cap.autocast, seed=seed)


def _agree_across_processes(names: list[str], reasons: dict[str, str], device: torch.device) -> list[str]:
    """The kernels that failed on any process (every process switches the same ones off)."""
    flags = torch.tensor([1.0 if n in reasons else 0.0 for n in names], device=device)
    if torch.distributed.is_available() and torch.distributed.is_initialized() and names:
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
    return [n for n, f in zip(names, flags.tolist()) if f > 0]
