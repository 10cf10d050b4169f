"""``--use_ema``: an fp32 exponential moving average (EMA) of a run's trainable weights.

The EMA follows diffusers' ``EMAModel`` (``diffusers.training_utils``): the same decay schedule
(:func:`ema_decay`: ``min(decay, (1+n)/(10+n))``, or the warm-up curve ``1 - (1 + n/inv_gamma)^-power``, zero for
the first ``update_after_step`` updates) and the same update, ``shadow -= (1 - decay) * (shadow - weight)``, over the
trainable weights only (LoRA and any trained backbone weights: never the frozen base). It is not ``EMAModel`` itself
because that class counts its updates and computes the decay on the host, once per call: it cannot leave out an
update the guard skipped without the host reading the guard's flag every step (a sync the loop never makes). Here the
update count and the decay live on the device, and the update is weighted by the guard's skip flag
(:attr:`~.guard.StepGuard.last_flag`): a skipped step multiplies it by zero and leaves the EMA and its count
bit-for-bit as they were, with no host read.

``--ema_device cpu`` keeps the average in host memory: each update copies the weights into pinned host buffers without
waiting (two slots, taking turns) and averages them on the CPU two EMA updates later (or before anything reads the
EMA), waiting only if the device has not finished that copy by then. On a CPU run the training device is the host
and both placements are the same.

The EMA is snapshotted and rolled back with the weights (a follower of the guard), written into every checkpoint
(:data:`EMA_FILE`, safetensors, with its update count and snapshot) and restored bit for bit at a resume, swapped
into the model for validation samples (``--ema_validation``) and exported beside the adapter
(:mod:`dit_lora.output.ema_adapter`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.core.errors import UserError
from dit_lora.output.adapter import assert_finite

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainingOptions, ValidationOptions

EMA_FILE = "ema_weights.safetensors"  # in every checkpoint of a --use_ema run
#: the options that mean something only with --use_ema
EMA_OPTIONS = (
    "ema_decay",
    "ema_update_after_step",
    "ema_warmup",
    "ema_inv_gamma",
    "ema_power",
    "ema_device",
    "ema_update_interval",
    "ema_validation",
)


def check_options(training: TrainingOptions, validation: ValidationOptions, explicit: frozenset[str] | None) -> None:
    """Refuse, in one paragraph, an --ema_* option that would do nothing: any without --use_ema, the warm-up's shape
    without --ema_warmup, an EMA --ema_validation without a --validation_prompt (no samples are made). ``explicit``:
    the options the user set (``cfg.explicit``)."""
    explicit = explicit or frozenset()
    given = [name for name in EMA_OPTIONS if name in explicit]
    if given and not training.use_ema:
        raise UserError(
            f"--{given[0]} is set but --use_ema is not, so no EMA is kept and it would do nothing. Add --use_ema "
            f"to keep an EMA of the trainable weights, or drop {', '.join('--' + n for n in given)}."
        )
    if "ema_validation" in explicit and training.ema_validation != "trained" and not validation.validation_prompt:
        raise UserError(
            f"--ema_validation {training.ema_validation} chooses which weights the validation samples come from, but no "
            "--validation_prompt is set, so the run makes no samples and it would do nothing. Add "
            "--validation_prompt (and --validation_steps) to sample from the EMA weights during training, or drop "
            "--ema_validation; the EMA adapter is exported beside the trained one either way."
        )
    shaping = [name for name in ("ema_inv_gamma", "ema_power") if name in explicit]
    if shaping and not training.ema_warmup:
        raise UserError(
            f"{' and '.join('--' + n for n in shaping)} shape the EMA's warm-up, but --ema_warmup is off, so the "
            "decay would not use them. Add --ema_warmup true (diffusers' EMAModel `use_ema_warmup`), or drop "
            f"{' and '.join('--' + n for n in shaping)}."
        )


def ema_decay(
    updates: torch.Tensor,
    *,
    decay: float,
    update_after_step: int = 0,
    use_warmup: bool = False,
    inv_gamma: float = 1.0,
    power: float = 2 / 3,
    min_decay: float = 0.0,
) -> torch.Tensor:
    """``EMAModel.get_decay`` computed on the device: ``updates`` is the count including this update (EMAModel's
    ``optimization_step``), a float64 tensor; the result is a tensor on its device, no host read."""
    step = (updates - update_after_step - 1).clamp(min=0)
    if use_warmup:
        current = 1 - (1 + step / inv_gamma) ** -power
    else:
        current = (1 + step) / (10 + step)
    current = torch.clamp(torch.clamp(current, max=decay), min=min_decay)
    return torch.where(step <= 0, torch.zeros_like(current), current)


def blend(shadow: list[torch.Tensor], weights: list[torch.Tensor], one_minus_decay: torch.Tensor) -> None:
    """EMAModel's update, ``shadow -= (1 - decay) * (shadow - weight)``, for every tensor at once; ``one_minus_decay``
    a scalar tensor (zero on a skipped step: the shadow keeps every bit)."""
    diff = torch._foreach_sub(shadow, weights)
    torch._foreach_mul_(diff, one_minus_decay)
    torch._foreach_sub_(shadow, diff)


class _Slot:
    """A pinned host copy of the weights and the update's weight, in flight until ``event`` completes."""

    def __init__(self, shadow: list[torch.Tensor]) -> None:
        self.weights = [torch.empty_like(s).pin_memory() for s in shadow]
        self.factor = torch.zeros((), dtype=torch.float32).pin_memory()
        self.event = torch.cuda.Event()
        self.pending = False


class TrainableEMA:
    """The fp32 EMA of ``params`` (name -> trainable parameter), updated by :meth:`update` after each optimizer
    update. ``training``: the run's training options (``cfg.training``: --ema_decay and the rest); ``device``: the
    training device; ``on_host``: ``--ema_device cpu``."""

    def __init__(self, params: dict[str, torch.nn.Parameter], training, device: torch.device, on_host: bool) -> None:
        self.names, self.params = list(params), list(params.values())
        self.options = training
        self.interval = int(training.ema_update_interval)
        self.host = on_host and device.type != "cpu"  # on a CPU run the host is the device
        where = torch.device("cpu") if self.host else device
        with torch.no_grad():
            self.shadow = [p.detach().to(where, torch.float32, copy=True) for p in self.params]
        self.updates = torch.zeros((), dtype=torch.float64, device=device)  # EMA updates applied (device)
        self.calls = 0  # optimizer updates seen (host): the --ema_update_interval phase
        self._slots = [_Slot(self.shadow), _Slot(self.shadow)] if self.host else []
        self._turn = 0
        self._order: list[_Slot] = []  # slots in flight, oldest first
        self._snapshot: tuple[list[torch.Tensor], torch.Tensor] | None = None

    # ---- per step (device only) ----------------------------------------------------------
    @torch.no_grad()
    def update(self, skipped: torch.Tensor) -> None:
        """After an optimizer update; ``skipped``: the guard's flag (a device scalar, 1.0 when the step changed
        nothing). Never reads the device: the update is weighted by ``1 - skipped``."""
        self.calls += 1
        if self.calls % self.interval:
            return
        ok = 1.0 - skipped.detach().double()
        updates = self.updates + ok
        factor = ((1.0 - self._decay(updates)) * ok).float()
        self.updates.copy_(updates)
        if not self.host:
            blend(self.shadow, [p.detach().float() for p in self.params], factor)
            return
        slot = self._slots[self._turn]
        self._turn ^= 1
        if slot.pending:  # its copies were made two EMA updates ago
            self._apply(slot)
        for buf, p in zip(slot.weights, self.params):
            buf.copy_(p.detach(), non_blocking=True)  # into pinned memory: no wait
        slot.factor.copy_(factor, non_blocking=True)
        slot.event.record()
        slot.pending = True
        self._order.append(slot)

    def _decay(self, updates: torch.Tensor) -> torch.Tensor:
        o = self.options
        return ema_decay(
            updates,
            decay=o.ema_decay,
            update_after_step=o.ema_update_after_step,
            use_warmup=o.ema_warmup,
            inv_gamma=o.ema_inv_gamma,
            power=o.ema_power,
        )

    def _apply(self, slot: _Slot) -> None:
        if not slot.event.query():  # in a step: a copy made two EMA updates ago, done long since unless the host
            slot.event.synchronize()  # runs that far ahead of the device; at a check or a save: the last copies
        blend(self.shadow, slot.weights, slot.factor)
        slot.pending = False
        self._order.remove(slot)

    @torch.no_grad()
    def flush(self) -> None:
        """Average in the host copies still in flight (``--ema_device cpu``), oldest first; called before the EMA is
        read (checkpoint, snapshot, validation, export)."""
        while self._order:
            self._apply(self._order[0])

    # ---- with the guard's snapshot (host, at checks) ---------------------------------------
    def take_snapshot(self) -> None:
        """Remember the EMA with the weights' snapshot (:meth:`~.guard.StepGuard.take_snapshot`)."""
        self.flush()
        self._snapshot = ([s.clone() for s in self.shadow], self.updates.clone())

    @torch.no_grad()
    def roll_back(self) -> None:
        """Return to the snapshot with the weights; without one (an EMA started at a resume), start again from the
        weights just restored."""
        self.flush()
        if self._snapshot is None:
            for s, p in zip(self.shadow, self.params):
                s.copy_(p.detach())
            self.updates.zero_()
            return
        shadow, updates = self._snapshot  # the update count goes back too; the interval's phase (calls) does not
        for s, saved in zip(self.shadow, shadow):
            s.copy_(saved)
        self.updates.copy_(updates)

    # ---- checkpoints -----------------------------------------------------------------------
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The EMA, its counts and its snapshot as named CPU tensors (safetensors)."""
        self.flush()
        out = {f"ema/{n}": s.detach().cpu() for n, s in zip(self.names, self.shadow)}
        out["updates"] = self.updates.detach().reshape(1).cpu()
        out["calls"] = torch.tensor([self.calls], dtype=torch.int64)
        if self._snapshot is not None:
            shadow, updates = self._snapshot
            out.update({f"snapshot/{n}": s.detach().cpu() for n, s in zip(self.names, shadow)})
            out["snapshot_updates"] = updates.detach().reshape(1).cpu()
        return {k: v.contiguous() for k, v in out.items()}

    def write(self, folder: Path) -> None:
        """Write :data:`EMA_FILE` into a checkpoint's staging folder (main process)."""
        from safetensors.torch import save_file

        tensors = self.state_tensors()
        assert_finite(tensors, f"checkpoint {folder} (EMA)")  # the guard keeps NaN out; never write it
        save_file(tensors, str(Path(folder) / EMA_FILE), metadata={"format": "pt", "options": self._options_json()})

    @torch.no_grad()
    def load(self, folder: Path) -> bool:
        """Restore the EMA from a checkpoint's :data:`EMA_FILE`; False when it has none."""
        from safetensors.torch import load_file

        path = Path(folder) / EMA_FILE
        if not path.is_file():
            return False
        saved = load_file(str(path))
        names = sorted(k[4:] for k in saved if k.startswith("ema/"))
        if names != sorted(self.names):
            extra = sorted(set(names) ^ set(self.names))
            raise UserError(
                f"{path} holds the EMA of other trainable weights than this run's (e.g. {extra[0]}): it was written "
                "with other --rank, --lora_layers or --train_backbone. Resume with the options of that run."
            )
        for n, s in zip(self.names, self.shadow):
            s.copy_(saved[f"ema/{n}"])
        self.updates.copy_(saved["updates"].reshape(()))
        self.calls = int(saved["calls"][0])
        if "snapshot_updates" in saved:
            device = self.shadow[0].device
            shadow = [saved[f"snapshot/{n}"].to(device) for n in self.names]
            self._snapshot = (shadow, saved["snapshot_updates"].reshape(()).to(self.updates.device))
        return True

    def _options_json(self) -> str:
        o = self.options
        return json.dumps({name: getattr(o, name) for name in EMA_OPTIONS})

    # ---- reading it (validation, export) ---------------------------------------------------
    def named(self) -> dict[str, torch.Tensor]:
        """The EMA by parameter name (for the export: :func:`~dit_lora.modeling.trainables.split_trainable_state`)."""
        self.flush()
        return dict(zip(self.names, self.shadow))

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The EMA weights in the model while the block runs, the trained ones back bit for bit after it."""
        self.flush()
        with torch.no_grad():
            kept = [p.detach().clone() for p in self.params]
            for p, s in zip(self.params, self.shadow):
                p.copy_(s)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, k in zip(self.params, kept):
                    p.copy_(k)

    def summary(self, files: list[str]) -> dict[str, Any]:
        """What train_summary.json and the model card say about the EMA (one host read of the count)."""
        o = self.options
        return {
            "decay": o.ema_decay,
            "update_after_step": o.ema_update_after_step,
            "warmup": {"inv_gamma": o.ema_inv_gamma, "power": o.ema_power} if o.ema_warmup else None,
            "device": o.ema_device,
            "update_interval": self.interval,
            "updates": int(self.updates.item()),
            "validation": o.ema_validation,
            "files": files,
        }


def start(run) -> TrainableEMA | None:
    """The run's EMA (None without --use_ema), restored from the checkpoint it resumes, and following the guard's
    snapshots. A checkpoint without one (a run started without --use_ema) starts it from the resumed weights."""
    cfg = run.cfg
    if not cfg.training.use_ema:
        if run.resume is not None and (Path(run.resume) / EMA_FILE).is_file():
            run.log(f"{run.resume.name} holds an EMA; this run has no --use_ema, so it is not continued")
        return None
    model = run.accelerator.unwrap_model(run.model)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    ema = TrainableEMA(params, cfg.training, run.accelerator.device, on_host=cfg.training.ema_device == "cpu")
    if run.resume is not None and not ema.load(run.resume):
        run.log(
            f"--use_ema: {run.resume.name} holds no EMA; the EMA starts from its weights at step "
            f"{run.state.global_step}"
        )
    run.guard.followers.append(ema)
    size = sum(s.numel() for s in ema.shadow) * 4
    run.log(
        f"EMA (--use_ema): fp32 copy of {len(params)} trainable tensors ({size / 2**20:.1f} MiB) on "
        f"{'the host' if ema.host or run.accelerator.device.type == 'cpu' else run.accelerator.device}, "
        f"decay {cfg.training.ema_decay:g} (~{1 / (1 - cfg.training.ema_decay):.0f} updates), updated every "
        f"{ema.interval} update(s) the guard applies"
    )
    return ema


def validation_weights(ema: TrainableEMA | None, choice: str) -> list[tuple[str, Any]]:
    """``(name suffix, context)`` for each set of weights validation samples come from (``--ema_validation``)."""
    if ema is None or choice == "trained":
        return [("", contextlib.nullcontext())]
    if choice == "ema":
        return [("_ema", ema.swapped_in())]
    return [("", contextlib.nullcontext()), ("_ema", ema.swapped_in())]


__all__ = ["EMA_FILE", "TrainableEMA", "blend", "check_options", "ema_decay", "start", "validation_weights"]
