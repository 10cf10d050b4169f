"""What the stages of a training run share: :class:`Run` (built by :func:`~.run.setup`; read by
:func:`~.loop.train_step`, :func:`~.loop.after_update`, :func:`~.finish.finish`, the recovery and the validation
loss), its counters that every checkpoint saves (:class:`RunState`), what the summary and card record
(:class:`RunRecord`), how far it goes (:class:`Schedule`) and the state within an update (:class:`UpdateState`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.spec import FamilySpec
from dit_lora.data import batches as batch_lib
from dit_lora.modeling.trainables import Trainables
from dit_lora.training.drills import Hooks
from dit_lora.training.engine import DDPEngine
from dit_lora.training.features import Features
from dit_lora.training.guard import StepGuard
from dit_lora.training.recovery import Recovery


@dataclass
class RunState:
    """Counters that define where a run is; saved in every checkpoint."""

    global_step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    samples_seen: int = 0
    skipped_steps: int = 0
    rollbacks: int = 0
    loss_history: list[list[float]] = field(default_factory=list)  # [step, loss]
    validation_losses: list[list[float]] = field(default_factory=list)  # [step, held-out loss] (validation_loss.py)


@dataclass
class RunRecord:
    """What the summary, the card and every checkpoint record about how the run was set up."""

    started: float  # perf_counter at setup: the summary's wall time
    defaults: Any = None  # catalogue.defaults.ChosenDefaults: what the run took from the catalogue or the model
    plan: Any = None  # plan.Plan: the predicted peak memory and FLOPs (None with --ignore_memory_plan)
    group_info: list = field(default_factory=list)  # trainables.ParamGroupInfo of each optimizer group
    # Options changed by resumes so far, each {"step", "option", "old", "new"} (summary, card, every checkpoint)
    changed_options: list[dict] = field(default_factory=list)
    options: dict | None = None  # what every checkpoint records about the options (resume_options.options_record)
    # The size options the validation samples take in place of the run's (data_sets.sample_sizes), worked out once
    # here from the sets setup read (the dataset config may change or go while the run trains)
    sample_sizes: dict[str, Any] = field(default_factory=dict)

    def sample_config(self, cfg: TrainConfig) -> TrainConfig:
        """``cfg`` at the validation samples' size (:attr:`sample_sizes`)."""
        return replace(cfg, **self.sample_sizes) if self.sample_sizes else cfg


@dataclass
class Schedule:
    """How far the run goes and in what order: the batch order, the updates, the guard's check interval, the
    learning-rate schedule (built by :func:`_build_optimizer`)."""

    order: batch_lib.BatchOrder
    max_steps: int
    interval: int  # the guard's check interval, in updates
    lr_scheduler: Any


@dataclass
class UpdateState:
    """Within an update (the micro-batches of one optimizer step): the noise generator, the loss so far, whether the
    next micro-batch opens an update, and whether a kernel check vetoed it."""

    generator: torch.Generator
    losses: torch.Tensor  # the update's loss so far (a device scalar)
    starts: bool = True  # the next micro-batch is the first of an update
    veto: bool = False  # a kernel failed its check during this update: skip it


@dataclass
class Run:
    """Everything the stages of one training run share (built by :func:`setup`)."""

    cfg: TrainConfig
    accelerator: Any
    spec: FamilySpec  # the family's spec
    log: Callable[[str], None]
    out: Path
    resume: Path | None
    hooks: Hooks  # drills and debug modes
    engine: DDPEngine  # training.engine: DDP (one process, or DDP) or FSDP2; the stages ask it, never its kind
    features: Features  # the levers (training.levers), called by the stages in one list
    record: RunRecord
    state: RunState = field(default_factory=RunState)
    # Set by setup's stages, never None once setup has returned: the later stages use them without a check. Not
    # arguments and no default (read before its stage, one raises AttributeError), left out of repr and comparison.
    comps: Any = field(init=False, repr=False, compare=False)  # (_load)
    data: Any = field(init=False, repr=False, compare=False)  # (_load)
    # (prompt, what the family's samples need for it) for each --validation_prompt, in order (_load)
    validation_conds: list[tuple[str, dict]] = field(init=False, repr=False, compare=False)
    trainables: Trainables = field(init=False, repr=False, compare=False)  # (_add_trainables)
    model: torch.nn.Module = field(init=False, repr=False, compare=False)  # as the engine wraps it (_build_optimizer)
    optimizer: Any = field(init=False, repr=False, compare=False)  # (_build_optimizer)
    schedule: Schedule = field(init=False, repr=False, compare=False)  # (_build_optimizer)
    guard: StepGuard = field(init=False, repr=False, compare=False)  # (_build_optimizer)
    recovery: Recovery = field(init=False, repr=False, compare=False)  # (_restore)
    update: UpdateState = field(init=False, repr=False, compare=False)  # (_restore)

    def load_batch(self, batch: dict, step: int) -> dict:
        """A collated batch as the step consumes it: on the device, cached or encoded, with any drill applied.

        The loop and the recovery's replay of a faulty step both go through here, so a replay sees what the
        step saw.
        """
        prior = batch.pop(batch_lib.PRIOR, None)  # prior preservation's class images, prepared alike
        batch = self.spec.loss.prepare_batch(self.comps, batch, self.accelerator.device, self.data.cached)
        if prior is not None:
            prior = self.spec.loss.prepare_batch(self.comps, prior, self.accelerator.device, self.data.cached)
            prior["step"] = step  # the same update's choices (Wan A14B's expert) as its instance images
            batch[batch_lib.PRIOR] = prior
        # The 1-based update number, a host int: a family may choose per step on the host (Wan A14B trains its
        # experts on alternate steps) without reading anything back from the device; a resumed run and a replay
        # see the same number.
        batch["step"] = step
        injector = self.hooks.injector
        return injector.batch(step, batch) if injector is not None else batch
