"""The finite-step guard: a bad step changes nothing, a persistent fault is rolled back.

Per optimizer step, on the device and without a host sync:

* a flag is raised when the loss or the total gradient norm is non-finite (or, with
  ``--skip_loss_spikes``, far above its running mean) on *any* process (all-reduce MAX);
* the fused AdamW kernel reads that flag as ``found_inf`` and leaves parameters, moments and its
  step count untouched, as do dit-lora's Prodigy, Adafactor, CAME and torchao low-bit AdamW, which
  take the same interface (non-fused optimizers, bitsandbytes' 8-bit AdamW, need one sync per step to
  skip: the sync audit's one documented per-step exception, :func:`~.sync_audit.deliberate`);
* the learning rate comes from a device-side table indexed by the number of *applied* updates, so
  a skipped step does not advance the schedule either;
* counters (skipped, non-finite losses/gradients, spikes, consecutive skips) stay on the device and
  are read once per check interval by :meth:`StepGuard.read`.

On the host, at each check, a window without skips refreshes an in-memory snapshot of the trainable
parameters and optimizer state (LoRA state is small); ``--max_consecutive_skips`` skips in a row
restore it and scale the learning rates by ``--rollback_lr_factor``; more than ``--max_rollbacks``
rollbacks stop the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dit_lora.config.schema import GuardOptions
from dit_lora.training.sync_audit import deliberate

# Counter slots in one device tensor, so a check reads everything with a single transfer.
# Slots from _WIN_LOSS on belong to the current check window and are reset when it is read.
(_SKIPPED, _BAD_LOSS, _BAD_GRAD, _SPIKES, _CONSECUTIVE, _APPLIED, _WIN_LOSS, _WIN_GOOD, _WIN_STEPS, _WIN_LONGEST) = (
    range(10)
)
_NUM_COUNTERS = 10
# Running statistics for the spike guard: loss mean/var, grad-norm mean/var, good steps seen.
_SPIKE_WARMUP = 20
_SPIKE_ALPHA = 0.05


class DeviceSkip:
    """The fused AdamW interface :meth:`StepGuard.optimizer_step` drives, for dit-lora's device-side optimizers
    (Prodigy, Adafactor, CAME, torchao's low-bit AdamW; mixed in before ``torch.optim.Optimizer``): the guard sets
    ``found_inf`` (a device float, 1.0: skip this step) and ``grad_scale`` before each step, and the optimizer skips
    without reading either on the host."""

    found_inf: torch.Tensor | None = None  # set by the guard before each step (1.0: skip)
    grad_scale: torch.Tensor | None = None  # the fused interface's other half: unused (no fp16 scaling)

    def keep_flags(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(1.0, or 0.0 when the guard skips this step, as float64; the same as a bool), on ``device``."""
        if self.found_inf is None:
            keep = torch.ones((), device=device, dtype=torch.float64)
        else:
            keep = (self.found_inf.to(device).reshape(()) <= 0).to(torch.float64)
        return keep, keep > 0


@dataclass
class GuardReading:
    """Host copy of the counters at a check."""

    skipped: int
    nonfinite_losses: int
    nonfinite_grads: int
    loss_spikes: int
    consecutive: int  # faulty steps in a row up to now
    longest_streak: int  # the longest run of faulty steps in a row that touched this window
    applied: int
    window_loss: float | None  # mean loss over the window's applied steps (None if none applied)
    window_steps: int
    window_applied: int  # updates applied in this window
    window_flags: list[bool]  # per step of the window: was it skipped?
    grad_norm: float  # of the last step (before clipping; may be NaN/Inf on a skipped step)
    learning_rates: list[float]  # per parameter group, now


class StepGuard:
    """Device-side skip decision, schedule and counters for one run (see module docstring)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        lr_lambdas: list,
        max_steps: int,
        device: torch.device,
        *,
        enabled: bool,
        fused: bool,
        interval: int,
        max_consecutive_skips: int,
        rollback_lr_factor: float,
        max_rollbacks: int,
        spike_sigma: float | None,
        world_size: int,
    ):
        self.optimizer, self.device = optimizer, device
        self.enabled, self.fused, self.interval = enabled, fused, interval
        self.max_consecutive_skips, self.rollback_lr_factor, self.max_rollbacks = (
            max_consecutive_skips,
            rollback_lr_factor,
            max_rollbacks,
        )
        self.spike_sigma, self.world_size = spike_sigma, world_size
        self.lr_factor = 1.0
        self.rollbacks: list[dict[str, Any]] = []
        # lr_tables[g][k] = learning rate of group g before the (k+1)-th applied update.
        self._base = [float(g.get("initial_lr", g["lr"])) for g in optimizer.param_groups]
        self._lambda_values = [
            torch.tensor([float(fn(k)) for k in range(max_steps + 1)], dtype=torch.float64) for fn in lr_lambdas
        ]
        self.counts = torch.zeros(_NUM_COUNTERS, dtype=torch.float64, device=device)
        self.spike_stats = torch.zeros(5, dtype=torch.float64, device=device)
        self.window_flags = torch.zeros(interval, dtype=torch.float64, device=device)
        self._unit = torch.ones((), device=device)
        self._zero = torch.zeros((), device=device)
        self._snapshot: dict[str, Any] | None = None
        self._last_norm = torch.full((), float("nan"), device=device)
        # 1.0 when the last update was skipped (a device scalar, never read here): what follows the update (the EMA,
        # training/ema.py) weighs itself by it instead of asking the host
        self.last_flag = self._zero
        # state that follows the trainable weights (the EMA): snapshotted and rolled back with them
        self.followers: list[Any] = []
        self.snapshot_step = 0
        self._install_lr()

    @classmethod
    def for_run(
        cls,
        guards: GuardOptions,
        optimizer: torch.optim.Optimizer,
        lr_lambdas: list,
        max_steps: int,
        device: torch.device,
        *,
        fused: bool,
        interval: int,
        world_size: int,
    ) -> StepGuard:
        """The guard a run's ``guards`` section (``cfg.guards``: --finite_guard, --max_consecutive_skips,
        --rollback_lr_factor, --max_rollbacks, --skip_loss_spikes) asks for."""
        return cls(
            optimizer,
            lr_lambdas,
            max_steps,
            device,
            enabled=guards.finite_guard,
            fused=fused,
            interval=interval,
            max_consecutive_skips=guards.max_consecutive_skips,
            rollback_lr_factor=guards.rollback_lr_factor,
            max_rollbacks=guards.max_rollbacks,
            spike_sigma=guards.skip_loss_spikes,
            world_size=world_size,
        )

    # ---- learning rate -------------------------------------------------------------------
    def _install_lr(self) -> None:
        """(Re)build the LR tables from the factor and set every group's LR for the next update.

        Fused AdamW takes a device LR tensor, indexed on the device by the applied-update count. Other
        optimizers (bitsandbytes' 8-bit AdamW) read the LR as a Python number, syncing once per
        parameter if given a tensor; they get host floats, set in :meth:`optimizer_step`.
        """
        self._host_tables = [
            (vals * base * self.lr_factor).tolist() for vals, base in zip(self._lambda_values, self._base)
        ]
        if not self.fused:
            applied_now = int(self.counts[_APPLIED])
            for group, host_table in zip(self.optimizer.param_groups, self._host_tables):
                group["lr"] = host_table[applied_now]
            return
        self._tables = [torch.tensor(table, dtype=torch.float32, device=self.device) for table in self._host_tables]
        applied = self.counts[_APPLIED].long().view(1)
        for group, table in zip(self.optimizer.param_groups, self._tables):
            group["lr"] = torch.index_select(table, 0, applied).squeeze(0).clone()

    def _set_lrs(self) -> None:
        if not self.fused:
            return  # host LRs are set before each step (optimizer_step)
        applied = self.counts[_APPLIED].long().view(1)
        for group, table in zip(self.optimizer.param_groups, self._tables):
            group["lr"].copy_(torch.index_select(table, 0, applied).squeeze(0))

    def current_lrs(self) -> list[float]:
        """Host values of the learning rates (syncs; call at checks only)."""
        return [float(g["lr"]) for g in self.optimizer.param_groups]

    # ---- per step (device only) ----------------------------------------------------------
    def step(
        self,
        optimizer,
        inner: torch.optim.Optimizer,
        loss: torch.Tensor,
        norm: torch.Tensor,
        slot: int,
        scaler=None,
        veto: bool = False,
    ) -> None:
        """One guarded optimizer update (or a plain one with ``--finite_guard false``).

        ``veto`` skips this update regardless (every process passes the same value: a kernel that failed
        its check during the step, agreed across processes).
        """
        if not self.enabled:
            self._last_norm, self.last_flag = norm.detach(), self._zero
            # Baseline without the guard: step unconditionally, advance the schedule, keep the loss log.
            optimizer.step()
            self.counts[_APPLIED] += 1
            self.counts[_WIN_LOSS] += loss.detach().double()
            self.counts[_WIN_GOOD] += 1
            self.counts[_WIN_STEPS] += 1
            self._set_lrs()
            return
        self._last_norm = norm.detach()
        fault = self.step_flag(loss, norm)
        flag = torch.ones_like(fault) if veto else fault
        self.last_flag = flag
        self.optimizer_step(optimizer, inner, flag, scaler)
        self.after_step(flag, loss, norm, slot, fault=fault)

    def step_flag(self, loss: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        """1.0 when this step must be skipped on every process, else 0.0 (a device scalar)."""
        loss = loss.detach().float()
        norm = norm.detach().float()
        reasons = torch.stack(
            [(~torch.isfinite(loss)).float(), (~torch.isfinite(norm)).float(), self._spike(loss, norm)]
        )
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(reasons, op=dist.ReduceOp.MAX)
        self._reasons = reasons
        flag = reasons.amax()
        return flag

    def _spike(self, loss: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        if self.spike_sigma is None:
            return self._zero
        s = self.spike_stats
        ready = s[4] >= _SPIKE_WARMUP
        sig = self.spike_sigma
        above = (loss.double() > s[0] + sig * s[1].clamp_min(0).sqrt()) | (
            norm.double() > s[2] + sig * s[3].clamp_min(0).sqrt()
        )
        return (ready & above & torch.isfinite(loss) & torch.isfinite(norm)).float()

    def optimizer_step(self, optimizer, inner: torch.optim.Optimizer, flag: torch.Tensor, scaler=None) -> None:
        """Run the optimizer step unless ``flag`` is set, without a host sync where the optimizer allows."""
        if scaler is not None:
            # fp16: fold our flag into GradScaler's own found_inf (grads were unscaled by clipping).
            state = scaler._per_optimizer_states[id(inner)]
            for found in state["found_inf_per_device"].values():
                found.copy_(torch.maximum(found, flag.to(found.device, found.dtype)))
            optimizer.step()
            return
        if self.fused:
            # The fused AdamW kernel returns early when found_inf == 1: params, moments and step untouched.
            # torch's fused kernels read these two by getattr (GradScaler's interface); Optimizer's stub lacks them
            inner.found_inf = flag.to(torch.float32)  # type: ignore[attr-defined]
            inner.grad_scale = self._unit  # type: ignore[attr-defined]
            optimizer.step()
            return
        # Non-fused optimizers (bitsandbytes' 8-bit AdamW): one transfer per step reads the flag and the schedule
        # position, and the step runs with host LRs. A documented exception to the sync audit: such an
        # optimizer keeps its step count and reads its LR on the host, so nothing can skip it on the device.
        with deliberate():
            skip, applied = torch.stack([flag.double(), self.counts[_APPLIED]]).tolist()
        if not skip:
            for group, table in zip(self.optimizer.param_groups, self._host_tables):
                group["lr"] = table[int(applied)]
            optimizer.step()

    def after_step(
        self, flag: torch.Tensor, loss: torch.Tensor, norm: torch.Tensor, slot: int, fault: torch.Tensor | None = None
    ) -> None:
        """Advance counters, schedule and running statistics by this step's outcome (device only).

        ``flag`` says the step was skipped; ``fault`` (default: ``flag``) whether it was a non-finite or
        spiking step. A step skipped for another reason (a kernel that failed its check) counts as
        skipped but neither starts a diagnosis nor moves toward a rollback.
        """
        fault = flag if fault is None else fault
        good = 1.0 - flag.double()
        reasons = self._reasons.double()
        loss_d = loss.detach().double()
        update = torch.stack(
            [
                flag.double(),
                reasons[0],
                reasons[1],
                reasons[2] * flag.double(),
                fault.double(),
                good,
                torch.where(good > 0, loss_d, torch.zeros_like(loss_d)),
                good,
                torch.ones_like(good),
                torch.zeros_like(good),  # the longest streak is a maximum, set below
            ]
        )
        self.counts += update
        # Consecutive faults reset on a step without one; where() keeps NaN out of the arithmetic.
        self.counts[_CONSECUTIVE] = torch.where(fault > 0, self.counts[_CONSECUTIVE], torch.zeros_like(good))
        # The longest streak is kept too: one that starts in one window and ends in the next is never
        # whole in either window's reading of the running count.
        self.counts[_WIN_LONGEST] = torch.maximum(self.counts[_WIN_LONGEST], self.counts[_CONSECUTIVE])
        self.window_flags[slot] = fault.double()
        self._set_lrs()
        if self.spike_sigma is not None:
            self._update_spike_stats(good > 0, loss_d, norm.detach().double())

    def _update_spike_stats(self, good: torch.Tensor, loss: torch.Tensor, norm: torch.Tensor) -> None:
        s = self.spike_stats
        alpha = torch.clamp(1.0 / (s[4] + 1.0), min=_SPIKE_ALPHA)
        new = s.clone()
        for mean_i, x in ((0, loss), (2, norm)):
            delta = x - s[mean_i]
            new[mean_i] = s[mean_i] + alpha * delta
            new[mean_i + 1] = (1 - alpha) * (s[mean_i + 1] + alpha * delta * delta)
        new[4] = s[4] + 1
        self.spike_stats.copy_(torch.where(good, new, s))

    # ---- at checks (host) ----------------------------------------------------------------
    def read(self) -> GuardReading:
        """One device-to-host transfer of all counters; resets the window."""
        lrs = [
            torch.as_tensor(g["lr"], device=self.device).detach().double().reshape(1)
            for g in self.optimizer.param_groups
        ]
        norm = self._last_norm.double().reshape(1).to(self.device)
        values = torch.cat([self.counts, norm, *lrs, self.window_flags]).tolist()
        c, extra, flags = (
            values[:_NUM_COUNTERS],
            values[_NUM_COUNTERS : _NUM_COUNTERS + 1 + len(lrs)],
            values[_NUM_COUNTERS + 1 + len(lrs) :],
        )
        steps = int(c[_WIN_STEPS])
        reading = GuardReading(
            skipped=int(c[_SKIPPED]),
            nonfinite_losses=int(c[_BAD_LOSS]),
            nonfinite_grads=int(c[_BAD_GRAD]),
            loss_spikes=int(c[_SPIKES]),
            consecutive=int(c[_CONSECUTIVE]),
            longest_streak=int(max(c[_WIN_LONGEST], c[_CONSECUTIVE])),
            applied=int(c[_APPLIED]),
            window_loss=c[_WIN_LOSS] / c[_WIN_GOOD] if c[_WIN_GOOD] else None,
            window_steps=steps,
            window_applied=int(c[_WIN_GOOD]),
            window_flags=[f > 0 for f in flags[:steps]],
            grad_norm=extra[0],
            learning_rates=extra[1:],
        )
        self.counts[_WIN_LOSS:] = 0
        self.window_flags.zero_()
        return reading

    def should_roll_back(self, reading: GuardReading) -> bool:
        """A streak of ``--max_consecutive_skips`` faulty steps or more since the last check, whatever its phase."""
        return self.enabled and reading.longest_streak >= self.max_consecutive_skips

    @property
    def has_snapshot(self) -> bool:
        """Whether a rollback target exists (a resumed run restores it from its checkpoint)."""
        return self._snapshot is not None

    def take_snapshot(self, model: torch.nn.Module, step: int) -> None:
        """Remember trainable parameters, optimizer state and schedule position (called after clean windows)."""
        params = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        opt_state = {}
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                st = self.optimizer.state.get(p)
                if st:
                    opt_state[id(p)] = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in st.items()}
        self._snapshot = {
            "params": params,
            "opt": opt_state,
            "groups": _group_tensors(self.optimizer),
            "applied": self.counts[_APPLIED].clone(),
            "spike": self.spike_stats.clone(),
        }
        self.snapshot_step = step
        for follower in self.followers:
            follower.take_snapshot()

    def snapshot_tensors(self, model: torch.nn.Module, to_cpu: bool = True) -> dict[str, torch.Tensor]:
        """The snapshot as named CPU tensors, for checkpoints (a resumed run rolls back to the same state);
        ``to_cpu=False`` keeps them where they are (FSDP2's sharded DTensors, written by each rank)."""
        snap = self._snapshot
        if snap is None:
            return {}
        names = {id(p): n for n, p in model.named_parameters()}
        out = {f"param/{n}": v for n, v in snap["params"].items()}
        for pid, state in snap["opt"].items():
            out.update({f"opt/{names[pid]}/{k}": v for k, v in state.items() if isinstance(v, torch.Tensor)})
        for i, group in enumerate(snap.get("groups", [])):
            out.update({f"group/{i}/{k}": v.reshape(1) for k, v in group.items()})
        out["applied"], out["spike"] = snap["applied"].reshape(1), snap["spike"]
        return {k: (v.detach().cpu() if to_cpu else v.detach()).contiguous() for k, v in out.items()}

    def load_snapshot_tensors(self, model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
        """Inverse of :meth:`snapshot_tensors`."""
        params = dict(model.named_parameters())
        opt: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            if key.startswith("opt/"):
                name, _, field = key[4:].rpartition("/")
                opt.setdefault(id(params[name]), {})[field] = value.to(params[name].device)
        groups: list[dict[str, torch.Tensor]] = [{} for _ in self.optimizer.param_groups]
        for key, value in tensors.items():
            if key.startswith("group/"):
                index, name = key[6:].split("/", 1)
                groups[int(index)][name] = value.to(self.device).reshape(())
        self._snapshot = {
            "params": {k[6:]: v.to(params[k[6:]].device) for k, v in tensors.items() if k.startswith("param/")},
            "opt": opt,
            "groups": groups,
            "applied": tensors["applied"].to(self.device).reshape(()),
            "spike": tensors["spike"].to(self.device),
        }

    def roll_back(self, model: torch.nn.Module, step: int) -> dict[str, Any]:
        """Restore the snapshot and scale the learning rates; returns the event for the report."""
        snap = self._snapshot
        assert snap is not None, "take_snapshot() runs before training starts"
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in snap["params"]:
                    p.copy_(snap["params"][n])
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                saved = snap["opt"].get(id(p))
                self.optimizer.state.pop(p, None)
                if saved is not None:
                    self.optimizer.state[p] = {
                        k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in saved.items()
                    }
        for group, saved_group in zip(self.optimizer.param_groups, snap.get("groups", []), strict=False):
            group.update({k: v.clone() for k, v in saved_group.items()})  # Prodigy's estimate (training/prodigy.py)
        for follower in self.followers:
            follower.roll_back()
        self.counts[_APPLIED] = snap["applied"]
        self.counts[_CONSECUTIVE] = 0
        self.spike_stats.copy_(snap["spike"])
        self.lr_factor *= self.rollback_lr_factor
        self._install_lr()
        event = {
            "step": step,
            "restored_step": self.snapshot_step,
            "lr_factor": self.lr_factor,
            "learning_rates": self.current_lrs(),
        }
        self.rollbacks.append(event)
        return event

    @property
    def exhausted(self) -> bool:
        """True once more rollbacks were needed than ``--max_rollbacks`` allows."""
        return len(self.rollbacks) > self.max_rollbacks

    # ---- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state for checkpoints (counters, schedule position, LR factor, rollbacks)."""
        return {
            "counts": self.counts.tolist(),
            "spike_stats": self.spike_stats.tolist(),
            "lr_factor": self.lr_factor,
            "rollbacks": self.rollbacks,
            "snapshot_step": self.snapshot_step,
            # a checkpoint can fall inside a check window: its per-step flags decide the next snapshot
            "window_flags": self.window_flags.tolist(),
            "last_norm": float(self._last_norm),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts.copy_(torch.tensor(state["counts"], dtype=torch.float64))
        self.spike_stats.copy_(torch.tensor(state["spike_stats"], dtype=torch.float64))
        self.lr_factor = float(state["lr_factor"])
        self.rollbacks = list(state["rollbacks"])
        self.snapshot_step = int(state.get("snapshot_step", 0))
        self.window_flags.copy_(torch.tensor(state["window_flags"], dtype=torch.float64))
        self._last_norm = torch.tensor(state["last_norm"], device=self.device)
        self._install_lr()


def _group_tensors(optimizer: torch.optim.Optimizer) -> list[dict[str, torch.Tensor]]:
    """Copies of each parameter group's 0-dim tensors but its learning rate (the schedule's: reinstalled on a
    rollback): Prodigy's step-size estimate and counts, which live in the group, not in a parameter's state."""
    return [
        {k: v.detach().clone() for k, v in g.items() if k != "lr" and isinstance(v, torch.Tensor) and v.dim() == 0}
        for g in optimizer.param_groups
    ]
