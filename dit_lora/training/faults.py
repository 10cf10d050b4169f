"""Fault drills: ``--inject_faults`` makes chosen steps non-finite on purpose.

Spec: comma-separated ``KIND@STEP``, ``KIND@START-END`` (inclusive), each optionally ``:rankR`` to
fire on one process only, plus the step-less ``broken_attention`` and ``broken_kernel``. Steps are 1-based optimizer
updates, as in the logs. Kinds:

* ``nan_loss`` / ``inf_loss``: the micro-batch loss becomes NaN / +Inf (gradients stay finite),
* ``nan_grad`` / ``inf_grad``: one trainable parameter's gradient becomes NaN / Inf during backward,
* ``nan_batch`` / ``inf_batch``: the first sample's latents (video LLMs: frames) in the micro-batch become
  NaN / Inf,
* ``overflow``: one attention block's output overflows, but only under reduced-precision autocast
  (what fp16 does to large activations): finite when replayed in fp32,
* ``spike``: the loss is multiplied by 1000 (finite; only ``--skip_loss_spikes`` catches it),
* ``broken_attention``: non-math attention kernels return NaN for the whole run (the attention
  canary should detect it and fall back),
* ``broken_kernel``: the fused modulate kernel gives every sample sample 0's scale and shift
  (OpenDiT's bug) for the whole run; the kernel check should switch it off at the first step.
  Needs the modulate kernel patched (``--kernels on``).

Injection never adds a host-device sync: every decision is made from the host-known step number.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.distributed.tensor import DTensor

from dit_lora.core.errors import UserError

STEP_KINDS = ("nan_loss", "inf_loss", "nan_grad", "inf_grad", "nan_batch", "inf_batch", "overflow", "spike")
GLOBAL_KINDS = ("broken_attention", "broken_kernel")
_ITEM = re.compile(r"^(?P<kind>[a-z_]+)(?:@(?P<start>\d+)(?:-(?P<end>\d+))?)?(?::rank(?P<rank>\d+))?$")


@dataclass(frozen=True)
class Fault:
    """One parsed drill item."""

    kind: str
    start: int = 0
    end: int = 0
    rank: int | None = None

    def fires(self, step: int, rank: int) -> bool:
        return self.start <= step <= self.end and (self.rank is None or self.rank == rank)


def parse_faults(spec: str | None) -> list[Fault]:
    """Parse ``--inject_faults``; a malformed item is a :class:`UserError` naming the valid forms."""
    faults: list[Fault] = []
    for raw in (spec or "").split(","):
        item = raw.strip()
        if not item:
            continue
        match = _ITEM.match(item)
        kind = match.group("kind") if match else None
        if match and kind in GLOBAL_KINDS and match.group("start") is None:
            rank = match.group("rank")
            faults.append(Fault(kind, rank=None if rank is None else int(rank)))
            continue
        if not match or kind not in STEP_KINDS or match.group("start") is None:
            raise UserError(
                f"--inject_faults item `{item}` is not understood. Use KIND@STEP, KIND@START-END or KIND@STEP:rankR "
                f"with KIND one of {', '.join(STEP_KINDS)}, or {', '.join(GLOBAL_KINDS)} alone; "
                "e.g. `nan_loss@3,inf_grad@5-12:rank1`."
            )
        start = int(match.group("start"))
        end = int(match.group("end") or start)
        if start < 1 or end < start:
            raise UserError(f"--inject_faults item `{item}`: steps count from 1 and END must be >= START.")
        rank = match.group("rank")
        faults.append(Fault(kind, start, end, None if rank is None else int(rank)))
    return faults


class FaultInjector:
    """Applies parsed drills to the batch, the loss and the backward pass of chosen steps."""

    def __init__(self, faults: list[Fault], rank: int):
        self.faults = faults
        self.rank = rank

    @classmethod
    def from_spec(cls, spec: str | None, rank: int) -> FaultInjector | None:
        faults = parse_faults(spec)
        return cls(faults, rank) if faults else None

    def _kinds(self, step: int) -> set[str]:
        return {f.kind for f in self.faults if f.kind in STEP_KINDS and f.fires(step, self.rank)}

    @property
    def broken_attention(self) -> bool:
        return any(f.kind == "broken_attention" and (f.rank is None or f.rank == self.rank) for f in self.faults)

    @property
    def broken_kernel(self) -> bool:
        return any(f.kind == "broken_kernel" and (f.rank is None or f.rank == self.rank) for f in self.faults)

    def batch(self, step: int, batch: dict) -> dict:
        """Make the first sample's latents non-finite (``nan_batch`` / ``inf_batch``)."""
        kinds = self._kinds(step)
        value = float("nan") if "nan_batch" in kinds else float("inf") if "inf_batch" in kinds else None
        if value is None:
            return batch
        # The model's main input: latents for diffusion families, frames for video LLMs.
        key = "latents" if "latents" in batch else "pixel_values_videos"
        latents = batch[key].clone()
        latents[0].view(-1)[: max(1, latents[0].numel() // 8)] = value
        return {**batch, key: latents}

    def loss(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        """Make the loss non-finite (``nan_loss`` / ``inf_loss``) or spike it (``spike``)."""
        kinds = self._kinds(step)
        if "nan_loss" in kinds:
            loss = loss + float("nan")
        if "inf_loss" in kinds:
            loss = loss + float("inf")
        if "spike" in kinds:
            loss = loss * 1000.0
        return loss

    @contextlib.contextmanager
    def active(self, step: int, model: torch.nn.Module) -> Iterator[None]:
        """Install the gradient and overflow drills of ``step`` on ``model`` for one forward/backward."""
        kinds = self._kinds(step)
        handles = []
        shard = None  # FSDP2: this rank's shard of a gradient, poisoned after the backward
        if kinds & {"nan_grad", "inf_grad"}:
            value = float("nan") if "nan_grad" in kinds else float("inf")
            params = [p for p in model.parameters() if p.requires_grad]
            if isinstance(params[0], DTensor):
                # A sharded (DTensor) parameter's own hooks never run: its module computes with the gathered copy
                # and FSDP2 writes the reduced shard into .grad; the drill poisons this rank's shard instead.
                shard = next((p for p in params if isinstance(p, DTensor) and p.to_local().numel()), params[0])
            else:
                handles.append(params[0].register_hook(lambda g, v=value: g + v))
        if "overflow" in kinds:
            target = _first_attention(model)

            def overflow(module, args, output):
                first = output[0] if isinstance(output, tuple) else output
                if not torch.is_autocast_enabled(first.device.type):
                    return None
                # Large activations rounded through fp16: the reduced-precision path overflows, fp32 would not.
                bad = (first.float() * 1e6).half().to(first.dtype)
                return (bad, *output[1:]) if isinstance(output, tuple) else bad

            handles.append(target.register_forward_hook(overflow))
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            grad = shard.grad if shard is not None else None  # None on a micro-batch that does not reduce
            if isinstance(grad, DTensor):
                with torch.no_grad():
                    grad.to_local().add_(value)


def _first_attention(model: torch.nn.Module) -> torch.nn.Module:
    for name, module in model.named_modules():
        if hasattr(module, "processor") and name:
            return module
    return next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
