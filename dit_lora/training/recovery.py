"""What happens at each guard check: diagnose the first fault, snapshot, roll back, or stop.

The loop records, per micro-batch, where its data came from and the noise generator's state, so a
skipped step can be replayed exactly (see :mod:`.diagnose`) after the fact: the step itself never
waits for the host to look at it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract import spec as fallback
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_json_atomic
from dit_lora.data import batches as batch_lib
from dit_lora.output.names import NONFINITE_REPORT_FILE
from dit_lora.training.diagnose import diagnose_step, format_paragraph
from dit_lora.training.features import class_images_loss
from dit_lora.training.guard import GuardReading, StepGuard

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class RunStopped(UserError):
    """A persistent fault outlived every rollback; the last finite adapter has been kept."""

    exit_code = 3


class RunUnhealthy(RunStopped):
    """The run reached its last step but skipped most of its updates: its adapter is barely trained."""


class Recovery:
    """Host-side half of the guard: replay records, diagnosis, snapshots, rollbacks, the report."""

    def __init__(
        self,
        *,
        guard: StepGuard,
        accelerator,
        spec: FamilySpec,
        comps,
        cfg: TrainConfig,
        data,
        order: batch_lib.BatchOrder,
        injector,
        load_batch: Callable[[dict, int], dict],
        log: Callable[[str], None],
        replay: bool = True,
    ):
        """``load_batch(batch, step)`` is the loop's own (:meth:`~.run_parts.Run.load_batch`): a replay sees what the step saw.
        ``replay=False`` (FSDP2) records a fault without replaying it: a replay's passes depend on what each rank
        finds, and a sharded forward needs every rank to run the same ones."""
        self.guard, self.accelerator, self.spec, self.comps, self.cfg = guard, accelerator, spec, comps, cfg
        self.data, self.order, self.injector, self.load_batch, self.log = data, order, injector, load_batch, log
        self.out = Path(cfg.training.output_dir)
        self.records: dict[int, list[tuple[int, int, int, torch.Tensor]]] = {}
        self.report: dict[str, Any] | None = None
        self.replay = replay

    # ---- per micro-batch -----------------------------------------------------------------
    def record(self, slot: int, step: int, epoch: int, batch_in_epoch: int, generator: torch.Generator) -> None:
        """Remember how to rebuild this micro-batch (data position + noise RNG state before its loss)."""
        self.records.setdefault(slot, []).append((step, epoch, batch_in_epoch, generator.get_state()))

    # ---- at checks -----------------------------------------------------------------------
    def start(self, model: torch.nn.Module, step: int) -> None:
        if self.guard.enabled and not self.guard.has_snapshot:  # a resumed run already has its snapshot
            self.guard.take_snapshot(model, step)

    def at_check(self, step: int, reading: GuardReading, wrapped) -> None:
        """Act on the counters read at a check. Raises :class:`RunStopped` when rollbacks are exhausted."""
        model = self.accelerator.unwrap_model(wrapped)
        bad_slots = [i for i, bad in enumerate(reading.window_flags) if bad]
        if bad_slots and self.report is None:
            self._diagnose(bad_slots[0], reading, wrapped)
        if self.guard.should_roll_back(reading):
            event = self.guard.roll_back(model, step)
            if self.guard.exhausted:
                self._update_report(reading, stopped=True)
                raise RunStopped(
                    f"Training stopped at step {step}: {reading.longest_streak} steps in a row were non-finite and "
                    f"{self.guard.max_rollbacks} rollback(s) (--max_rollbacks) with the learning rate scaled by "
                    f"{self.guard.rollback_lr_factor} each did not help. The last finite weights (step "
                    f"{self.guard.snapshot_step}) are saved in {self.out}; see {self.out / NONFINITE_REPORT_FILE} for which "
                    "sample and module went non-finite and what to change."
                )
            self.log(
                f"warning: {reading.longest_streak} consecutive non-finite steps: rolled back to the weights and "
                f"optimizer state of step {self.guard.snapshot_step} and scaled the learning rates by "
                f"{self.guard.rollback_lr_factor} (now {', '.join(f'{lr:.3g}' for lr in event['learning_rates'])}); "
                f"rollback {len(self.guard.rollbacks)} of at most {self.guard.max_rollbacks}."
            )
        elif self.guard.enabled and reading.consecutive == 0 and 2 * len(bad_slots) < len(reading.window_flags):
            # A window that ends on an applied step and is mostly clean is a good state: an isolated
            # skip (which changed nothing) must not pin the snapshot to the start of the run.
            self.guard.take_snapshot(model, step)
        if self.report is not None:
            self._update_report(reading, stopped=False)
        self.records.clear()

    def verdict(self, total: GuardReading, last_window: GuardReading | None, steps: int) -> str | None:
        """None for a healthy run; otherwise the paragraph that ends it with exit code 3.

        Unhealthy: more than ``--max_skipped_fraction`` of the run's ``steps`` updates were skipped, or the
        last check window applied none (the adapter is whatever the last good step left).
        """
        if not self.guard.enabled or steps <= 0:
            return None
        fraction = total.skipped / steps
        last_empty = last_window is not None and last_window.window_steps > 0 and last_window.window_applied == 0
        if fraction <= self.cfg.guards.max_skipped_fraction and not last_empty:
            return None
        why = (
            f"{total.skipped} of its {steps} updates ({fraction:.0%}) were skipped as non-finite or spiking"
            + (", including every update of the last check window" if last_empty else "")
            + f" (--max_skipped_fraction {self.cfg.guards.max_skipped_fraction:g})"
        )
        diagnosis = ""
        if self.report is not None and self.report.get("first_fault"):
            diagnosis = " First fault: " + format_paragraph(self.report["first_fault"])
        return (
            f"Training reached its last step, but {why}, so the adapter learned little: it is the last finite "
            f"state (after {total.applied} applied updates), written to {self.out} and labelled as such in "
            f"train_summary.json and the model card, and not pushed.{diagnosis} Lower --learning_rate, check the "
            f"samples named in {self.out / NONFINITE_REPORT_FILE}, or raise --max_skipped_fraction to accept it."
        )

    # ---- diagnosis -----------------------------------------------------------------------
    def _diagnose(self, slot: int, reading: GuardReading, wrapped) -> None:
        acc = self.accelerator
        if not self.replay:
            step = next((rec[0] for rec in self.records.get(slot, [])), None)
            why = "not replayed: under FSDP2 a replay would need every process to run the same sharded passes"
            self.report = {"first_fault": None, "first_faulty_step": step, "diagnosis": why}
            self.log(f"non-finite step {step} skipped on every process ({why})")
            return
        model = acc.unwrap_model(wrapped)
        found: dict[str, Any] | None = None
        with torch.random.fork_rng(devices=[acc.device] if acc.device.type == "cuda" else []), acc.no_sync(wrapped):
            for step, epoch, batch_in_epoch, gen_state in self.records.get(slot, []):
                items = next(iter(self.order.batches(epoch, batch_in_epoch)))
                batch = self.load_batch(self.data.collate([self.data.dataset[item] for item in items]), step)
                names = [self._name(i) for i in batch["sample_index"]]
                report = diagnose_step(
                    model=model,
                    loss_fn=self._loss_fn(step),
                    batch=batch,
                    generator_state=gen_state,
                    autocast_ctx=acc.autocast,
                    sample_names=names,
                    step=step,
                    observed={
                        "skipped_steps": reading.skipped,
                        "nonfinite_losses": reading.nonfinite_losses,
                        "nonfinite_grads": reading.nonfinite_grads,
                        "loss_spikes": reading.loss_spikes,
                        "learning_rate": self.guard.current_lrs()[0],
                        "max_grad_norm": self.cfg.training.max_grad_norm,
                        "train_backbone": fallback.backbone_patterns(self.spec, self.cfg.lora, self.cfg.family_options),
                        "mixed_precision": self.cfg.training.mixed_precision,
                        "compile": self.cfg.performance.compile,
                    },
                    fault_context=self._fault_context(step, model),
                )
                report["rank"] = acc.process_index
                if found is None or report.get("classification") != "not reproduced":
                    found = report
                if report.get("classification") != "not reproduced":
                    break
        reports = [found]
        if acc.num_processes > 1:
            from accelerate.utils import gather_object

            reports = gather_object([found])
        # Prefer a rank that reproduced the fault; a step is skipped everywhere when one rank is bad.
        chosen = next((r for r in reports if r and r.get("classification") != "not reproduced"), reports[0])
        self.report = {"first_fault": chosen, "all_ranks": reports if len(reports) > 1 else None}
        if acc.is_main_process and chosen is not None:
            self.log("non-finite step diagnosed: " + format_paragraph(chosen))

    def _name(self, index: int) -> str:
        return self.data.samples[int(index)].display_name()  # a file, or an annotation entry and its video

    def _loss_fn(self, step: int):
        def loss_fn(model, batch, generator):
            loss = self.spec.loss.compute_loss(self.comps, model, batch, generator, self.cfg)
            loss = self.injector.loss(step, loss) if self.injector is not None else loss
            prior = batch.get(batch_lib.PRIOR)  # prior preservation's class images, added as the step adds them
            if prior is not None and self.data.sets is not None:  # in the replay's own precision (no autocast here)
                weight = self.data.sets.prior_loss_weight
                loss = loss + class_images_loss(self.spec, self.comps, self.cfg, weight, model, prior, generator)
            return loss

        return loss_fn

    def _fault_context(self, step: int, model):
        if self.injector is None:
            return None
        return lambda: self.injector.active(step, model)

    def _update_report(self, reading: GuardReading, *, stopped: bool) -> None:
        if self.report is None:
            self.report = {"first_fault": None}
        self.report.update(
            {
                "status": "stopped" if stopped else "running",
                "skipped_steps": reading.skipped,
                "nonfinite_losses": reading.nonfinite_losses,
                "nonfinite_grads": reading.nonfinite_grads,
                "loss_spikes": reading.loss_spikes,
                "rollbacks": self.guard.rollbacks,
                "last_good_step": self.guard.snapshot_step,
            }
        )
        if self.accelerator.is_main_process:
            write_json_atomic(self.out / NONFINITE_REPORT_FILE, self.report)


__all__ = ["Recovery", "RunStopped", "RunUnhealthy"]
