"""The last stage of a run: the adapter, final samples, loss curve, summary, model card and Hub push.

:func:`finish` runs after the last step, after a :class:`~.recovery.RunStopped` (the last finite adapter
only) and for a run the recovery judged unhealthy (written and labelled, never pushed). Before it, the loop
keeps the trained state in a final checkpoint (:func:`keep_final_checkpoint`), so a full disk during the export
loses nothing: every write here that runs out of space is one paragraph saying how to write the outputs later
(``--resume_from_checkpoint latest`` resumes at the last step and goes straight here).
"""

from __future__ import annotations

import contextlib
import json
import resource
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from dit_lora.contract import spec as fallback
from dit_lora.core.collective import main_process_check
from dit_lora.core.fileio import DiskFullError, free_bytes, human_bytes, reporting_disk_full, write_json_atomic
from dit_lora.kernels import kernel_counts, kernel_runtime
from dit_lora.modeling import trainables
from dit_lora.output.adapter import adapter_file_name, write_adapter
from dit_lora.output.ema_adapter import ema_view, remove_stale_ema, write_ema_adapter
from dit_lora.output.hub import push_after_run
from dit_lora.output.names import LOSS_CURVE_FILE, MODEL_CARD_FILE, NONFINITE_REPORT_FILE, SUMMARY_FILE
from dit_lora.output.report import config_dict, finite_or_none, plot_loss_curve, write_model_card
from dit_lora.output.samples import save_prompt_samples
from dit_lora.training import levers, validation_loss
from dit_lora.training.checkpoint import complete_checkpoints, newest_whole
from dit_lora.training.run_parts import Run
from dit_lora.training.signals import rerun_command
from dit_lora.training.tracker_media import log_samples


def keep_final_checkpoint(run: Run, steps_this_run: int, save: Callable[[Run], Path]) -> Path | None:
    """The checkpoint holding the run's final state, written with ``save(run)`` unless one exists for the step.

    Every rank calls this (a save is collective) and decides alike, from the counters; a save that fails on one
    rank raises on every rank (:func:`~.checkpoint.save_checkpoint`), so they go on alike too. A resume at the last
    step already has it (the checkpoint it resumed from). A full disk here is a warning, not a stop: the adapter,
    smaller than a checkpoint, may still fit, and writing it keeps the training.
    """
    cfg, step = run.cfg, run.state.global_step
    if steps_this_run == 0:
        return run.resume
    if cfg.checkpoints.checkpointing_steps and step % cfg.checkpoints.checkpointing_steps == 0:
        return run.out / f"checkpoint-{step}"  # after_update saved it
    try:
        return save(run)
    except DiskFullError:
        run.log(
            f"warning: no space left on device for the final checkpoint-{step} ({human_bytes(free_bytes(run.out))} "
            "free; its staging folder was removed): writing the adapter without that safety net"
        )
        return None


def finish(
    run: Run,
    *,
    train_time: float,
    steps_this_run: int,
    stopped: bool = False,
    verdict: str | None = None,
    final_checkpoint: Path | None = None,
    reading=None,
) -> dict[str, Any]:
    """Write the adapter, final samples, loss curve, summary and card (the adapter only, when stopped).

    ``verdict`` (from :meth:`~.recovery.Recovery.verdict`) labels a run that skipped most of its updates: its
    summary and card say so, and it is not pushed. ``final_checkpoint`` (:func:`keep_final_checkpoint`) is named
    when a full disk stops the export, and removed once everything is written if the user asked for no
    checkpoints (``--checkpointing_steps 0``). ``reading``: the guard's final reading when the caller has taken it
    (one host read at the end, shared with the verdict). Returns the summary (empty on ranks other than the main one).
    """
    accelerator = run.accelerator
    accelerator.wait_for_everyone()
    model = run.engine.unwrap(run.model)
    if reading is None:  # a stopped run: no verdict read the guard's totals
        reading = run.guard.read()
    run.state.skipped_steps, run.state.rollbacks = reading.skipped, len(run.guard.rollbacks)
    # FSDP2: the trainable weights gathered whole once, every rank taking part; the main process writes them (DDP:
    # None, read from the model)
    full = run.engine.full_trainables()
    # The main process writes; its failure (a full disk, a failed push) is every process's, so none waits for ever
    # at a barrier the main process never reaches. Its broadcast is the barrier before end_training.
    summary = main_process_check(
        accelerator,
        lambda: _export(
            run,
            model,
            reading,
            train_time=train_time,
            steps_this_run=steps_this_run,
            stopped=stopped,
            verdict=verdict,
            final_checkpoint=final_checkpoint,
            full=full,
        ),
        what="writing the run's outputs",
    )
    end_trackers(accelerator)
    return summary or {}


def end_trackers(accelerator) -> None:
    """Close the trackers (tensorboard, wandb). Not ``Accelerator.end_training``: it also destroys the process group,
    and destroying a gloo group sometimes aborts the process in a C++ destructor ("terminate called without an
    active exception", exit 134 after a finished two-process run; core/errors.py says how the process leaves)."""
    for tracker in accelerator.trackers:
        tracker.finish()


def _export(
    run: Run,
    model,
    reading,
    *,
    train_time: float,
    steps_this_run: int,
    stopped: bool,
    verdict: str | None,
    final_checkpoint: Path | None,
    full: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Main process: the adapter, final samples, loss curve, summary, card and push; returns the summary.
    ``full``: the trainable weights gathered whole (FSDP2), else they are read from ``model``."""
    cfg, spec, state, guard, out = run.cfg, run.spec, run.state, run.guard, run.out
    advice = _export_advice(run, final_checkpoint)
    lora_state, backbone = trainables.split_trainable_state(model, run.trainables.saved_backbone, state=full)
    metadata = model.peft_config["default"].to_dict()
    patterns = fallback.backbone_patterns(spec, cfg.lora, cfg.family_options) + [
        p for _, pats, _ in fallback.extra_trainable(spec, cfg.family_options) for p in pats
    ]
    with reporting_disk_full("the adapter", out, needed=_bytes(lora_state) + _bytes(backbone), advice=advice):
        written = write_adapter(spec, out, lora_state, metadata, backbone, patterns, comps=run.comps, cfg=cfg)
    print(f"adapter written: {', '.join(str(p) for p in written)}", flush=True)
    ema_files = _write_ema(run, model, metadata, patterns, advice, [p.name for p in written])
    with reporting_disk_full("the final samples", out / "samples", advice=advice):
        sample_files = [] if stopped else _final_samples(run, model)
    ema = levers.ema_of(run.features)
    summary_ema = ema.summary([str(p) for p in ema_files]) if ema is not None else None
    with reporting_disk_full("the loss curve", out / LOSS_CURVE_FILE, advice=advice):
        plot_loss_curve(
            [int(s) for s, _ in state.loss_history],
            [loss for _, loss in state.loss_history],
            out / LOSS_CURVE_FILE,
            rollbacks=[int(e["step"]) for e in guard.rollbacks],
            validation=[(int(s), loss) for s, loss in state.validation_losses],
        )
    summary = _summary(
        run,
        model,
        reading,
        train_time=train_time,
        steps_this_run=steps_this_run,
        stopped=stopped,
        verdict=verdict,
        sample_files=sample_files,
    )
    summary["ema"] = summary_ema
    with reporting_disk_full(
        "the run summary", out / SUMMARY_FILE, advice=advice, needed=len(json.dumps(summary, default=str))
    ):
        write_json_atomic(out / SUMMARY_FILE, summary)
        if run.recovery.report is not None:
            run.recovery.report["status"] = "stopped" if stopped else "completed"
            write_json_atomic(out / NONFINITE_REPORT_FILE, run.recovery.report)
    if not stopped:
        with reporting_disk_full("the model card", out / MODEL_CARD_FILE, advice=advice):
            _publish(run, summary, sample_files, push=verdict is None, final_checkpoint=final_checkpoint)
    return summary


def _write_ema(run: Run, model, metadata: dict, patterns: list[str], advice, adapter: list[str]) -> list[Path]:
    """``--use_ema``: the EMA adapter beside the trained one (:func:`~dit_lora.output.ema_adapter.write_ema_adapter`:
    the same savers, folding and checks; FSDP2, whose weights are gathered for the export, refuses --use_ema).
    Without it, an earlier run's EMA versions of the ``adapter`` files just written are removed."""
    ema = levers.ema_of(run.features)
    if ema is None:
        for path in remove_stale_ema(run.out, adapter):
            run.log(
                f"removed {path.relative_to(run.out)}: the EMA adapter of an earlier run (this one has no --use_ema)"
            )
        return []
    lora_state, backbone = trainables.split_trainable_state(model, run.trainables.saved_backbone, state=ema.named())
    with reporting_disk_full("the EMA adapter", run.out, needed=_bytes(lora_state) + _bytes(backbone), advice=advice):
        written = write_ema_adapter(
            run.spec, run.out, lora_state, metadata, backbone, patterns, comps=run.comps, cfg=run.cfg
        )
    print(f"EMA adapter written: {', '.join(str(p) for p in written)}", flush=True)
    return written


def _bytes(tensors: dict) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _export_advice(run: Run, final_checkpoint: Path | None) -> Callable[[], str]:
    """What a full disk during the export leaves and the command that writes the outputs later."""

    def advice() -> str:
        if final_checkpoint is not None and final_checkpoint.is_dir():
            return (
                f"The trained state is kept in {final_checkpoint} (step {run.state.global_step}). Free space, "
                f"then write the outputs with: {rerun_command()} (it resumes at the last step and trains "
                "nothing more)."
            )
        whole = newest_whole(run.out)
        if whole is not None:
            return (
                f"No checkpoint holds the final step; the newest whole one is {whole}. Free space, then continue "
                f"with: {rerun_command()} (it trains the steps after {whole.name} again)."
            )
        return (
            "No checkpoint holds this run's training (there was no space for a final one), so it is lost: free "
            "space and run again."
        )

    return advice


def _drop_export_checkpoint(run: Run, final_checkpoint: Path | None) -> None:
    """With ``--checkpointing_steps 0`` the final checkpoint was only the export's safety net: remove it once the
    adapter, samples, curve and summary are written (a checkpoint of any other step is never touched)."""
    step = run.state.global_step
    if (
        run.cfg.checkpoints.checkpointing_steps
        or final_checkpoint is None
        or step != run.schedule.max_steps
        or final_checkpoint.name != f"checkpoint-{step}"
        or not final_checkpoint.is_dir()
    ):
        return
    shutil.rmtree(final_checkpoint)
    run.log(f"removed {final_checkpoint.name}, kept only until the export was written (--checkpointing_steps 0)")


def _final_samples(run: Run, model: torch.nn.Module) -> list[Path]:
    """Samples from a fresh pipeline with the saved adapter loaded by the consumer itself."""
    cfg, spec, out = run.cfg, run.spec, run.out
    prompts = cfg.validation.prompts
    if not prompts:
        return []
    run.engine.release_for_samples(model)  # off the accelerator so base + fresh pipeline fit (FSDP2: left sharded)
    samples = fallback.require(spec, "samples", "--validation_prompt")
    sized = run.record.sample_config(cfg)  # with data sets: their size when the run gives none (read at setup)
    (out / "samples").mkdir(exist_ok=True)
    files = []
    choice = cfg.training.ema_validation if levers.ema_of(run.features) is not None else "trained"
    for suffix, folder in (("", None), ("_ema", ema_view)):  # --ema_validation: the EMA adapter's samples too
        if (suffix and choice == "trained") or (not suffix and choice == "ema"):
            continue
        with folder(out) if folder is not None else contextlib.nullcontext(out) as adapter_dir:
            pipe = spec.adapter.load_pipeline_with_adapter(cfg, adapter_dir, run.accelerator.device)
        made = [
            samples.generate_with_pipeline(
                pipe,
                prompt,
                replace(sized, validation=cfg.validation.one_prompt(prompt)),
                cfg.training.seed + k,  # each prompt its own seed, as during training (loop._generate)
                cfg.validation.num_validation_images,
                comps=run.comps,
            )
            for k, prompt in enumerate(prompts)
        ]
        written = save_prompt_samples(
            lambda item, stem: samples.save_sample(item, stem, cfg), out / "samples", f"final{suffix}", prompts, made
        )
        fps = samples.fps(cfg) if hasattr(samples, "fps") else 8.0
        log_samples(run.accelerator, f"final{suffix}", prompts, made, written, run.state.global_step, fps)
        files += written
        del pipe
    return files


def _summary(
    run: Run,
    model,
    reading,
    *,
    train_time: float,
    steps_this_run: int,
    stopped: bool,
    verdict: str | None,
    sample_files: list[Path],
) -> dict[str, Any]:
    """``train_summary.json``: what ran, how it went, where its files are."""
    accelerator, cfg, state, guard = run.accelerator, run.cfg, run.state, run.guard
    final_loss = state.loss_history[-1][1] if state.loss_history else None
    report_file = run.out / NONFINITE_REPORT_FILE
    peak = _peak_memory_bytes(accelerator.device)
    runtime = kernel_runtime(model)
    return {
        "family": cfg.model.family,
        "status": "stopped_nonfinite" if stopped else "mostly_skipped" if verdict else "completed",
        "verdict": verdict,
        "steps": state.global_step,
        "steps_this_run": steps_this_run,
        "samples_seen": state.samples_seen,
        "wall_time_s": round(time.perf_counter() - run.record.started, 3),
        "train_time_s": round(train_time, 3),
        "steps_per_second": round(steps_this_run / train_time, 4) if train_time > 0 else None,
        "peak_memory_bytes": peak,
        "peak_memory_gib": round(peak / 2**30, 3),
        "device": str(accelerator.device),
        "gradient_checkpointing": bool(getattr(model, "is_gradient_checkpointing", False)),
        "final_loss": finite_or_none(final_loss),
        "skipped_steps": reading.skipped,
        "rollbacks": len(guard.rollbacks),
        "nonfinite_losses": reading.nonfinite_losses,
        "nonfinite_grads": reading.nonfinite_grads,
        "loss_spikes": reading.loss_spikes,
        "applied_updates": reading.applied,
        "rollback_events": guard.rollbacks,
        "nonfinite_report": str(report_file) if report_file.exists() else None,
        "quarantine": run.data.quarantine,
        # a dataset config's sets: name, training samples, batch probability, loss factor (None: one data set)
        "data_sets": levers.data_sets_summary(run),
        "kernels": runtime.summary(kernel_counts(model)) if runtime else None,
        "compile": levers.compile_summary(run.features),
        "num_processes": accelerator.num_processes,
        # the micro-batch that trained per process: --train_batch_size, or the data's size when that is smaller
        "train_batch_size": run.schedule.order.largest_batch,
        # what actually ran: NO, MULTI_GPU, MULTI_CPU (DDP), or FSDP2 (accelerate's state is a plain multi-process one)
        "engine": run.engine.summary_name(),
        "param_groups": [vars(g) for g in run.record.group_info],
        "loss_history": [[s, finite_or_none(loss)] for s, loss in state.loss_history],
        "validation_loss": validation_loss.summary(run),  # the held-out loss at fixed noise, every evaluation
        "adapter": str(run.out / adapter_file_name(run.spec, cfg.lora.lora_type)),
        "adapter_type": cfg.lora.lora_type,
        "samples": [str(p) for p in sample_files],
        "defaults": run.record.defaults.summary() if run.record.defaults is not None else None,
        "memory_plan": run.record.plan.as_dict() if run.record.plan is not None else None,
        "config": config_dict(cfg),
        "changed_options": run.record.changed_options,  # each with the step a resume changed it at
    }


def _peak_memory_bytes(device) -> int:
    """On a GPU the caching allocator's peak; on a CPU this process's peak resident set.

    The CPU figure is ``VmHWM`` of ``/proc/self/status`` where there is one: Linux carries the launching
    process's resident size into ``ru_maxrss`` across fork and exec (a recipe started by a 2 GiB Python
    process reports at least 2 GiB), while ``VmHWM`` is the high-water mark of this program's own memory.
    """
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _publish(
    run: Run, summary: dict, sample_files: list[Path], push: bool = True, final_checkpoint: Path | None = None
) -> None:
    """Model card, the list of outputs, and the optional Hub push of a completed run (never of an unhealthy one)."""
    cfg, spec, out = run.cfg, run.spec, run.out
    card = write_model_card(spec, cfg, out, summary, sample_files)
    _drop_export_checkpoint(run, final_checkpoint)  # every output is written now
    where = [
        ("adapter", out / adapter_file_name(spec, cfg.lora.lora_type)),
        ("model card", card),
        ("summary", out / SUMMARY_FILE),
    ]
    where[1:1] = [("EMA adapter", Path(p)) for p in (summary.get("ema") or {}).get("files", [])]  # --use_ema
    if (out / LOSS_CURVE_FILE).is_file():
        where.append(("loss curve", out / LOSS_CURVE_FILE))
    where += [("sample", p) for p in sample_files]
    where += [("checkpoint", p) for _, p in complete_checkpoints(out)]
    if cfg.validation.report_to != "none":
        where.append((f"{cfg.validation.report_to} logs", out / cfg.validation.logging_dir))
    width = max(len(k) for k, _ in where)
    head = "finished" if push else "finished, but most updates were skipped (see the verdict below)"
    print(f"\n{head}: " + "\n  ".join([""] + [f"{k:<{width}} {v}" for k, v in where]), flush=True)
    if cfg.hub.push_to_hub and push:
        push_after_run(out, cfg.hub, log=lambda line: print(line, flush=True))


__all__ = ["finish"]
