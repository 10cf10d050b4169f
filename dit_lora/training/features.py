"""A run's levers as features behind one small protocol, held in one list (``Run.features``).

A lever (block swap, activation offloading, ``--compile``, ``--use_ema``, the kernel checks and attention canary,
the drills and the sync audit) is a :class:`Feature`: setup calls its :meth:`~Feature.install` at its ``stage``, the
step calls its hooks, the checkpoints save and restore its state. The loop never names a lever: it calls
:class:`Features`, which calls every feature in list order. A new lever is a new feature (:mod:`.levers`) added to
:func:`~.levers.for_run`'s list, not fields on ``Run`` and branches in the step.

The hooks of one micro-batch, in the order the step (:func:`~.loop.train_step`) calls them; every one has a
do-nothing default, so a feature defines only what it changes:

=====================  ===================================================================================
``before_step``        host bookkeeping before the micro-batch (the kernel check's arming)
``around_step``        a context around the whole micro-batch (the sync audit; eager on a check step)
``around_transfer``    a context around the batch's move onto the device (the audit lets that copy pass)
``around_forward``     a context around forward and backward (the fault drills)
``after_loss``         the loss on its way to the backward (a drill may replace it)
``after_backward``     after the backward (the sampled kernel check, which may veto the update)
``after_update``       at an update's last micro-batch, after the guarded optimizer step (the EMA)
``after_step``         after the micro-batch (compile's counters, the crash points)
=====================  ===================================================================================

Outside the step: ``outside_step`` is the context for forwards that are not a training step (a replay, an
evaluation, samples: compiled regions run eagerly there). Checkpoints: a feature with a ``key`` saves
``state_dict()`` under that key of every checkpoint's trainer state and gets it back through ``load_state_dict``;
``write_files(folder)`` writes further files into a checkpoint (the main process; the EMA's safetensors).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch

#: the setup stages that install features, in order (:mod:`.run`)
STAGES = ("kernels", "model", "restore")


@dataclass
class StepContext:
    """What the features of one micro-batch share: its update number, whether it opens the update, the batch (the
    loader's, then the step's inputs once on the device), and what the features decided for it."""

    step: int
    first: bool  # the first micro-batch of an update
    batch: dict
    checking: bool = False  # a sampled kernel-check step: it runs eagerly
    #: the factor of this micro-batch's loss in the backward (a data set's loss weight); the logged loss and the
    #: guard's statistics take the loss unscaled
    loss_factor: float = 1.0
    #: a loss added after that factor, in the backward and the logged loss (prior preservation's weighted class loss)
    added_loss: torch.Tensor | None = None

    def backward_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """What the backward takes: ``loss`` times :attr:`loss_factor`, plus :attr:`added_loss`."""
        scaled = loss * self.loss_factor if self.loss_factor != 1.0 else loss
        return scaled + self.added_loss if self.added_loss is not None else scaled

    def logged_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """What the progress, the guard and the summary see: ``loss`` plus :attr:`added_loss`, unscaled."""
        return loss + self.added_loss if self.added_loss is not None else loss

    shape: Any = None  # what a static compiled graph is specialised on (--compile)


class Feature:
    """One lever of a run (see the module docstring). Every hook does nothing by default."""

    #: the setup stage whose end installs it (one of :data:`STAGES`)
    stage: ClassVar[str] = "model"
    #: its entry in every checkpoint's trainer state (None: it keeps nothing there)
    key: ClassVar[str | None] = None
    #: a checkpoint may lack its entry (one written before the feature existed): it then keeps its start state
    state_optional: ClassVar[bool] = False

    def install(self, run) -> None:
        """Put the lever on the run's model (at its ``stage`` of setup)."""

    def before_step(self, run, ctx: StepContext) -> None:
        """Host bookkeeping before the micro-batch."""

    def around_step(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        """A context around the whole micro-batch."""
        return contextlib.nullcontext()

    def around_transfer(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        """A context around the batch's move onto the device."""
        return contextlib.nullcontext()

    def around_forward(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        """A context around the forward and backward (``ctx.batch``: the step's inputs)."""
        return contextlib.nullcontext()

    def after_loss(self, run, ctx: StepContext, loss: torch.Tensor) -> torch.Tensor:
        """The loss the backward takes."""
        return loss

    def after_backward(self, run, ctx: StepContext) -> None:
        """After the micro-batch's backward."""

    def after_update(self, run, ctx: StepContext) -> None:
        """After the guarded optimizer step of an update (device work only: no host read)."""

    def after_step(self, run, ctx: StepContext) -> None:
        """After the micro-batch."""

    def outside_step(self) -> contextlib.AbstractContextManager:
        """A context for forwards outside the training step (replays, evaluations, samples)."""
        return contextlib.nullcontext()

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps under :attr:`key` (JSON-safe)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`, at a resume."""

    def write_files(self, folder: Path) -> None:
        """Further files of a checkpoint, written into its staging ``folder`` (main process)."""

    def writes_files(self) -> bool:
        """Whether :meth:`write_files` writes anything for this run."""
        return False


F = TypeVar("F", bound=Feature)


class Features:
    """The run's features in order; each method calls every feature's hook of the same name."""

    def __init__(self, items: Sequence[Feature]) -> None:
        self.items = list(items)

    def __iter__(self) -> Iterator[Feature]:
        return iter(self.items)

    def find(self, kind: type[F]) -> F | None:
        """The feature of class ``kind`` (for a stage that reads what a lever holds: the export reads the EMA)."""
        return next((f for f in self.items if isinstance(f, kind)), None)

    def install(self, run, stage: str) -> None:
        """Install the features of ``stage``, in list order."""
        assert stage in STAGES, stage
        for feature in self.items:
            if feature.stage == stage:
                feature.install(run)

    def before_step(self, run, ctx: StepContext) -> None:
        for feature in self.items:
            feature.before_step(run, ctx)

    @contextlib.contextmanager
    def _nested(self, hook: str, *args) -> Iterator[None]:
        with contextlib.ExitStack() as stack:  # entered in list order, left in reverse
            for feature in self.items:
                stack.enter_context(getattr(feature, hook)(*args))
            yield

    def around_step(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        return self._nested("around_step", run, ctx)

    def around_transfer(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        return self._nested("around_transfer", run, ctx)

    def around_forward(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        return self._nested("around_forward", run, ctx)

    def after_loss(self, run, ctx: StepContext, loss: torch.Tensor) -> torch.Tensor:
        for feature in self.items:
            loss = feature.after_loss(run, ctx, loss)
        return loss

    def after_backward(self, run, ctx: StepContext) -> None:
        for feature in self.items:
            feature.after_backward(run, ctx)

    def after_update(self, run, ctx: StepContext) -> None:
        for feature in self.items:
            feature.after_update(run, ctx)

    def after_step(self, run, ctx: StepContext) -> None:
        for feature in self.items:
            feature.after_step(run, ctx)

    def outside_step(self) -> contextlib.AbstractContextManager:
        return self._nested("outside_step")

    def state_dict(self) -> dict[str, Any]:
        """Every keyed feature's state, by key (merged into a checkpoint's trainer state); a feature whose state is
        optional and empty (nothing to keep in this run) writes no entry, so the format stays as it was."""
        states = {f.key: (f, f.state_dict()) for f in self.items if f.key is not None}
        return {key: state for key, (f, state) in states.items() if state or not f.state_optional}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Give every keyed feature its entry of a checkpoint's trainer state ``saved``."""
        for feature in self.items:
            if feature.key is not None and (feature.key in saved or not feature.state_optional):
                feature.load_state_dict(saved[feature.key])

    def file_writer(self) -> Callable[[Path], None] | None:
        """What writes the features' own files into a checkpoint; None when none of them writes any."""
        writers = [f for f in self.items if f.writes_files()]
        if not writers:
            return None

        def write(folder: Path) -> None:
            for feature in writers:
                feature.write_files(folder)

        return write


__all__ = ["STAGES", "Feature", "Features", "StepContext"]


def class_images_loss(spec, comps, cfg, prior_loss_weight: float, model, prior: dict, generator) -> torch.Tensor:
    """--prior_loss_weight times the family's loss on a micro-batch's class images (prior preservation), in the
    caller's precision: what a step adds to its loss, and what the recovery's replay of that step adds alike."""
    return prior_loss_weight * spec.loss.compute_loss(comps, model, prior, generator, cfg)
