"""The family-agnostic training loop on accelerate, in named stages.

``train(cfg)`` strings them together:

* :func:`~.run.setup` builds the :class:`~.run_parts.Run` (accelerator, family spec and components, data, LoRA,
  kernels, optimizer, guard, recovery, a resumed checkpoint);
* :func:`train_step` runs one micro-batch: load it, loss, backward, the sampled kernel check, and at the
  last micro-batch of an update the clipped, guarded optimizer step (a non-finite step changes nothing,
  decided on the device);
* :func:`after_update` does what follows an update on the host: progress, the check window (the guard's
  only host read), rollback or stop, checkpoints, validation;
* :func:`~.finish.finish` writes the adapter, samples, summary and card, and pushes.

Everything model-specific goes through the family spec; this file never asks which family it is training.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract import spec as fallback
from dit_lora.core.errors import Interrupted, UserError
from dit_lora.core.progress import Progress
from dit_lora.data import batches as batch_lib
from dit_lora.output.samples import save_prompt_samples
from dit_lora.setup.resolve import Resolved
from dit_lora.training import ema as ema_lib
from dit_lora.training import levers, output_lock, signals, validation_loss
from dit_lora.training.checkpoint import save_checkpoint
from dit_lora.training.features import StepContext
from dit_lora.training.finish import end_trackers, finish, keep_final_checkpoint
from dit_lora.training.guard import GuardReading
from dit_lora.training.recovery import RunStopped, RunUnhealthy
from dit_lora.training.run import setup
from dit_lora.training.run_parts import Run, RunState
from dit_lora.training.tracker_media import log_samples

OnStep = Callable[[int, torch.nn.Module, torch.optim.Optimizer], None]


def train(cfg: TrainConfig | Resolved, on_step: OnStep | None = None) -> dict[str, Any]:
    """Run a LoRA fine-tune described by ``cfg`` (a config, or what :func:`dit_lora.setup.resolve.resolve`
    returned); return the summary that is also written to disk.

    ``on_step(step, model, optimizer)`` is called after every optimizer update (tests and extensions use it to
    inspect state; anything it reads from the device costs a sync). SIGTERM, SIGINT and SIGHUP stop the run after
    the update in flight with a checkpoint (:mod:`.signals`; raises :class:`~dit_lora.core.errors.Interrupted`).
    """
    owned = not signals.installed()  # the recipe's entry point installs them for the whole process
    output_dir = (cfg.config if isinstance(cfg, Resolved) else cfg).training.output_dir
    locks_before = output_lock.holds(output_dir)  # setup takes one; a setup that failed before it took none
    stop = signals.current()
    try:
        return _train(cfg, on_step, stop)
    except Exception as err:
        if stop.signum is None or not stop.distributed or isinstance(err, UserError):
            raise
        # A stop under several processes: a peer that ended first (stopped while it was still setting up, or
        # killed) breaks the next collective; that is the stop, not a new fault.
        raise Interrupted(
            f"stopped by {signals.signal_name(stop.signum)}: another process ended before the run "
            f"could save ({type(err).__name__}); the last whole checkpoint stays.",
            stop.exit_code,
        ) from None
    finally:
        if owned:
            signals.release()  # an in-process run leaves its caller's handlers as they were
        else:  # kept until the process exits: a launcher's forwarded repeat of the stop must not find Python's default
            stop.end()
        if output_lock.holds(output_dir) > locks_before:  # a process exit releases it anyway; an in-process
            output_lock.release(output_dir)  # run ends here, giving back only the acquisition its setup made


def _train(cfg: TrainConfig | Resolved, on_step: OnStep | None, stop: signals.StopSignals) -> dict[str, Any]:
    run = setup(cfg)
    cfg = run.cfg  # the resolved config
    stop.start_training(run.accelerator, run.out)
    state = run.state
    # A bar on a terminal, plain lines every 10% or 30 s without one; run.log prints above an open bar.
    progress = Progress(
        run.schedule.max_steps,
        initial=state.global_step,
        enabled=run.accelerator.is_main_process,
        desc="step",
        unit="step",
    )
    run.model.train()
    if validation_loss.due(run, state.global_step):  # before the first update: the curve's baseline
        validation_loss.record(run, progress)
    clock = _Clock(steps_at_start=state.global_step)
    try:
        while state.global_step < run.schedule.max_steps:
            loader = batch_lib.epoch_loader(
                run.data.dataset,
                run.data.collate,
                run.schedule.order,
                state.epoch,
                state.batch_in_epoch,
                cfg.data.dataloader_num_workers,
            )
            for batch in loader:
                if not train_step(run, batch):
                    continue
                after_update(run, progress, clock, on_step)
                if stop.should_stop():  # a host flag (and, with several processes, a CPU all-reduce)
                    _stop_on_signal(run, progress, stop)
                if state.global_step >= run.schedule.max_steps:
                    break
            else:
                state.epoch += 1
                state.batch_in_epoch = 0
    except RunStopped:
        progress.close()
        finish(run, train_time=clock.train_time(), steps_this_run=clock.steps(state), stopped=True)
        raise
    except BaseException:
        progress.close()  # the error's paragraph and traceback print below the bar, not on its line
        raise
    progress.close()
    if stop.finish_training():  # a signal during the last update
        _stop_on_signal(run, progress, stop)
    train_time = clock.train_time()
    reading = run.guard.read()  # the guard's last host read: the verdict and the summary share it
    verdict = run.recovery.verdict(reading, clock.last_window, state.global_step)
    # The trained state is kept before the export, so a full disk while writing the adapter loses nothing.
    final = keep_final_checkpoint(run, clock.steps(state), save_run_checkpoint)
    summary = finish(
        run,
        train_time=train_time,
        steps_this_run=clock.steps(state),
        verdict=verdict,
        final_checkpoint=final,
        reading=reading,
    )
    if verdict is not None:
        raise RunUnhealthy(verdict)
    return summary


class _Clock:
    """Wall-clock bookkeeping of the step loop (host only) and the last check window's reading."""

    def __init__(self, steps_at_start: int) -> None:
        self.steps_at_start = steps_at_start
        self.train_started = self.window_start = time.perf_counter()
        self.last_window: GuardReading | None = None  # the reading of the last check window, for the run's verdict

    def train_time(self) -> float:
        return time.perf_counter() - self.train_started

    def steps(self, state: RunState) -> int:
        return state.global_step - self.steps_at_start


def train_step(run: Run, batch: dict) -> bool:
    """One micro-batch; returns True when it completed an optimizer update (guarded: maybe skipped).

    The levers act through the features' hooks (:mod:`.features`), the engine does the gradient sync and the
    clipping: the step names neither a lever nor an engine.
    """
    cfg, accelerator, state, update, features = run.cfg, run.accelerator, run.state, run.update, run.features
    step = state.global_step + 1  # the update this micro-batch contributes to (1-based, as logged)
    slot = (step - 1) % run.schedule.interval
    ctx = StepContext(step=step, first=update.starts, batch=batch)
    update.starts = False
    features.before_step(run, ctx)  # the kernel check arms at an update's first micro-batch
    run.recovery.record(slot, step, state.epoch, state.batch_in_epoch, update.generator)
    with features.around_step(run, ctx), accelerator.accumulate(run.model):
        with features.around_transfer(run, ctx):  # the loader's batch onto the device
            ctx.batch = run.load_batch(batch, step)
        with features.around_forward(run, ctx):
            with accelerator.autocast():
                loss = run.spec.loss.compute_loss(run.comps, run.model, ctx.batch, update.generator, cfg)
            loss = features.after_loss(run, ctx, loss)
            run.engine.set_gradient_sync(accelerator.sync_gradients)  # FSDP2: reduce-scatter at the last only
            accelerator.backward(ctx.backward_loss(loss))
        features.after_backward(run, ctx)  # the sampled kernel check (may veto the update)
        update.losses += ctx.logged_loss(loss).detach() / cfg.training.gradient_accumulation_steps
        state.batch_in_epoch += 1
        state.samples_seen += len(ctx.batch["sample_index"]) * accelerator.num_processes
        if accelerator.sync_gradients:
            norm = run.engine.clip(run.model, cfg.training.max_grad_norm)
            run.guard.step(
                run.optimizer, run.optimizer.optimizer, update.losses, norm, slot, accelerator.scaler, veto=update.veto
            )
            features.after_update(run, ctx)  # the EMA, weighted by the guard's device flag
            update.losses.zero_()
            update.veto, update.starts = False, True
        run.optimizer.zero_grad(set_to_none=True)
    features.after_step(run, ctx)  # compile's counters, the crash points
    return accelerator.sync_gradients


def after_update(run: Run, progress: Progress, clock: _Clock, on_step: OnStep | None = None) -> None:
    """Host-side work after an optimizer update: the check window, rollbacks, checkpoints, validation."""
    cfg, state, schedule = run.cfg, run.state, run.schedule
    state.global_step += 1
    if on_step is not None:
        on_step(state.global_step, run.engine.unwrap(run.model), run.optimizer.optimizer)
    if state.global_step % schedule.interval == 0 or state.global_step == schedule.max_steps:
        # The only host reads of the guard: once per check interval, never per step.
        reading = clock.last_window = run.guard.read()
        _log_window(run, progress, reading, (time.perf_counter() - clock.window_start) / max(1, reading.window_steps))
        with run.features.outside_step():  # a diagnosis replays the faulty step (eagerly: no recompiles)
            run.recovery.at_check(state.global_step, reading, run.model)
        clock.window_start = time.perf_counter()
    if validation_loss.due(run, state.global_step):  # before the checkpoint, which then holds it; not step time
        clock.window_start += validation_loss.record(run, progress)
    progress.update(1)  # after the check window and the held-out loss: a plain progress line then carries both
    if cfg.checkpoints.checkpointing_steps and state.global_step % cfg.checkpoints.checkpointing_steps == 0:
        save_run_checkpoint(run)
    if (
        run.validation_conds
        and state.global_step % cfg.validation.validation_steps == 0
        and state.global_step < schedule.max_steps
    ):
        _validate(run, f"step{state.global_step}")


def save_run_checkpoint(run: Run):
    """``checkpoint-<global_step>`` of the run as it stands after an update (scheduled, or on a stop signal): the
    counters, the guard's and the levers' state, the engine's weights and optimizer state, the levers' files."""
    state = run.state
    return save_checkpoint(
        run.accelerator,
        run.out,
        state.global_step,
        {"run": vars(state), "guard": run.guard.state_dict(), **run.features.state_dict()},
        run.update.generator,
        run.cfg.checkpoints.checkpoints_total_limit,
        log=run.log,
        crash_point=run.hooks.crash_point,
        options=run.record.options,
        write_state=run.engine.save_state,
        extra_files=run.features.file_writer(),
    )


def _stop_on_signal(run: Run, progress: Progress, stop: signals.StopSignals) -> None:
    """Every rank, after the same update: save a checkpoint (unless this step's was just saved), say how to
    resume, raise :class:`~dit_lora.core.errors.Interrupted` (exit 143 for SIGTERM, 130 for SIGINT)."""
    cfg, step = run.cfg, run.state.global_step
    progress.close()
    path = run.out / f"checkpoint-{step}"
    if not (
        cfg.checkpoints.checkpointing_steps and step % cfg.checkpoints.checkpointing_steps == 0
    ):  # else after_update has saved it
        path = save_run_checkpoint(run)
    end_trackers(run.accelerator)
    name = (
        signals.signal_name(stop.signum) if stop.signum is not None else "a stop signal that another process received"
    )
    message = (
        (
            f"stopped by {name} after step {step} of {run.schedule.max_steps}: saved {path}. "
            + signals.resume_command(run.out, step)
        )
        if run.accelerator.is_main_process
        else ""
    )
    raise Interrupted(message, stop.exit_code)


def _log_window(run: Run, progress: Progress, reading: GuardReading, step_time: float) -> None:
    """Record one check interval in the progress bar, the trackers and the loss history."""
    state, guard = run.state, run.guard
    state.skipped_steps = reading.skipped
    state.rollbacks = len(guard.rollbacks)
    lr, grad_norm = reading.learning_rates[0], reading.grad_norm
    if reading.window_loss is not None:
        state.loss_history.append([state.global_step, reading.window_loss])
    # Short: the bar must fit a terminal (its rate already gives the step time).
    postfix: dict[str, str | int] = {
        "loss": f"{reading.window_loss:.4f}" if reading.window_loss is not None else "skipped",
        "lr": f"{lr:.2e}",
        "grad_norm": f"{grad_norm:.3f}",
    }
    if reading.skipped:
        postfix.update(skipped=reading.skipped, nan_loss=reading.nonfinite_losses, nan_grad=reading.nonfinite_grads)
    if guard.rollbacks:
        postfix["rollbacks"] = len(guard.rollbacks)
    # the values stay on the lines until the next check: which step they were read at, never passed off as the
    # current step's (a plain line every sixth step showed step 24's values again at step 30)
    postfix["read at"] = f"step {state.global_step}"
    if state.validation_losses:  # the last held-out loss stays on the line between evaluations
        postfix["val_loss"] = f"{state.validation_losses[-1][1]:.4f}"
    progress.set_postfix(postfix)
    values = {
        "lr": lr,
        "step_time_s": step_time,
        "skipped_steps": reading.skipped,
        "rollbacks": len(guard.rollbacks),
        "nonfinite_losses": reading.nonfinite_losses,
        "nonfinite_grads": reading.nonfinite_grads,
        "loss_spikes": reading.loss_spikes,
    }
    if reading.window_loss is not None:
        values["loss"] = reading.window_loss
    if math.isfinite(grad_norm):
        values["grad_norm"] = grad_norm
    run.accelerator.log(values, step=state.global_step)


def _validate(run: Run, tag: str) -> None:
    """Samples from the model being trained (main process; under FSDP2 every process takes part in the sharded
    forward passes, with the same seed), saved as ``samples/<tag>_<i>`` by the main process."""
    if not run.accelerator.is_main_process and not run.engine.samples_on_every_rank:
        return
    samples = fallback.require(run.spec, "samples", "--validation_prompt")
    model = run.engine.unwrap(run.model)
    model.eval()
    made = []
    try:
        run.hooks.crash_point("validation", run.state.global_step)  # DIT_LORA_SIGNAL's instant in a validation
        ema = levers.ema_of(run.features)
        for suffix, weights in ema_lib.validation_weights(ema, run.cfg.training.ema_validation):  # --ema_validation
            with weights, run.accelerator.autocast(), run.features.outside_step():
                made.append((suffix, [_generate(run, samples, model, k) for k in range(len(run.validation_conds))]))
    finally:
        model.train()
    if not run.accelerator.is_main_process:
        return
    folder = run.out / "samples"
    folder.mkdir(parents=True, exist_ok=True)
    prompts = [prompt for prompt, _ in run.validation_conds]
    for suffix, per_prompt in made:
        files = save_prompt_samples(
            lambda item, stem: samples.save_sample(item, stem, run.cfg), folder, f"{tag}{suffix}", prompts, per_prompt
        )
        fps = samples.fps(run.cfg) if hasattr(samples, "fps") else 8.0
        log_samples(run.accelerator, f"validation{suffix}", prompts, per_prompt, files, run.state.global_step, fps)


def _generate(run: Run, samples, model: torch.nn.Module, k: int) -> list:
    """The samples of validation prompt ``k`` from the model being trained: that prompt alone in the config the
    family reads, its own seed (--seed + k)."""
    prompt, cond = run.validation_conds[k]
    sized = run.record.sample_config(run.cfg)  # with data sets: their size when the run gives none (read at setup)
    cfg = replace(sized, validation=run.cfg.validation.one_prompt(prompt))
    return samples.generate(run.comps, model, cond, cfg, seed=run.cfg.training.seed + k)


__all__ = ["RunState", "after_update", "train", "train_step"]
