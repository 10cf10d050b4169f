"""The family-agnostic training loop on accelerate.

Everything model-specific goes through the :class:`~dit_lora.families.ModelFamily` spec; this
file never asks which family it is training.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ..config import TrainConfig
from ..data import batches as batch_lib
from ..data.prepare import batch_to_device, prepare_data
from ..errors import UserError
from ..families import get_family
from ..kernels import kernel_counts, kernel_runtime, patch_model
from ..kernels.monitor import install_sample_mixing_modulate
from ..output.adapter import assert_finite, write_adapter
from ..output.names import ADAPTER_FILES, LOSS_CURVE_FILE, NONFINITE_REPORT_FILE, PRECISION_AUDIT_FILE, SUMMARY_FILE
from ..fileio import write_json_atomic
from ..output.report import config_dict, finite_or_none, plot_loss_curve, write_model_card
from . import adapters
from .canary import attention_canary, install_broken_attention
from .checkpoint import complete_checkpoints, fault_point, load_checkpoint, resolve_resume, save_checkpoint
from .faults import FaultInjector
from .guard import StepGuard
from .optim import make_lr_scheduler, make_optimizer
from .precision import audit_precision, check_fp16_denoiser, format_audit
from .recovery import Recovery, RunStopped, RunUnhealthy
from .sync_audit import SyncAudit


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


def check_output_dir(cfg: TrainConfig) -> None:
    """Refuse to overwrite a finished run unless asked to (or resuming)."""
    out = Path(cfg.output_dir)
    done = [name for name in ADAPTER_FILES if (out / name).exists()]
    if done and not cfg.overwrite_output_dir and not cfg.resume_from_checkpoint:
        raise UserError(
            f"--output_dir `{out}` already holds a finished run ({done[0]}). Choose a new --output_dir, "
            "add --overwrite_output_dir to replace it, or --resume_from_checkpoint latest to continue it."
        )
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir `{out}` is a file, not a folder. Choose a folder path.")


_SHARDED_ENGINES = {"ACCELERATE_USE_DEEPSPEED": "DeepSpeed", "ACCELERATE_USE_FSDP": "FSDP"}


def check_engine() -> None:
    """Refuse DeepSpeed and FSDP launches before anything loads, naming what to use instead.

    The guard's promises need plain data parallelism: DeepSpeed runs the optimizer step inside its
    backward (no step can be skipped) and returns the gradient norm as a Python float; FSDP2 shards
    gradients into DTensors that the guard, the rollback snapshot and exact resume do not handle.
    LoRA's frozen base is replicated under DDP at no optimizer cost.
    """
    for var, name in _SHARDED_ENGINES.items():
        if os.environ.get(var, "").lower() in ("1", "true"):
            raise UserError(
                f"This run was launched with {name} ({var}=true), which dit-lora does not support: "
                + ("DeepSpeed runs the optimizer step inside its backward, so a non-finite step could not be skipped. "
                   if name == "DeepSpeed" else "FSDP shards gradients, which the finite-step guard, its rollback "
                   "snapshot and exact resume do not handle. ")
                + "Launch with `accelerate launch --config_file accelerate_configs/multi_gpu.yaml` (DDP: the frozen base "
                "model is replicated, the LoRA optimizer state is small) or accelerate_configs/single_gpu.yaml; to save "
                "memory, keep --gradient_checkpointing on and lower --train_batch_size."
            )


def _log(accelerator, msg: str) -> None:
    if accelerator.is_main_process:
        print(msg, flush=True)


def train(cfg: TrainConfig, on_step: Callable[[int, torch.nn.Module, torch.optim.Optimizer], None] | None = None
          ) -> dict[str, Any]:
    """Run a LoRA fine-tune described by ``cfg``; return the summary that is also written to disk.

    ``on_step(step, model, optimizer)`` is called after every optimizer update (tests and extensions use it to
    inspect state; anything it reads from the device costs a sync).
    """
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration, set_seed

    check_engine()
    family = get_family(cfg.family)
    check_output_dir(cfg)
    out = Path(cfg.output_dir)
    resume = resolve_resume(out, cfg.resume_from_checkpoint)  # a bad path fails before any model loads
    accelerator = Accelerator(
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        mixed_precision=cfg.mixed_precision,
        log_with=None if cfg.report_to == "none" else cfg.report_to,
        project_config=ProjectConfiguration(project_dir=str(out), logging_dir=str(out / cfg.logging_dir)),
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=False)],
        # Without a GPU, `accelerate launch --multi_gpu` would start N unrelated single processes that all
        # write the same output_dir; cpu=True makes them one gloo group instead.
        cpu=not torch.cuda.is_available(),
    )
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != accelerator.num_processes:
        raise UserError(
            f"{launched} processes were launched but they did not form one group (accelerate sees "
            f"{accelerator.num_processes}); they would overwrite each other's output. Launch with a matching "
            "accelerate config (see accelerate_configs/), e.g. `accelerate launch --multi_gpu --num_processes N`."
        )
    log = lambda m: _log(accelerator, m)  # noqa: E731
    if cfg.demo:
        if accelerator.is_main_process:
            family.prepare_demo(cfg)
        accelerator.wait_for_everyone()
    family.validate_config(cfg)
    injector = FaultInjector.from_spec(cfg.inject_faults, accelerator.process_index)  # malformed: fail before loading
    for note in family.start_notes(cfg):
        log(note)
    for note in family.precision_notes(cfg):
        log(f"warning: {note}")
    if cfg.allow_tf32 and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
    set_seed(cfg.seed)
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    comps = family.load_components(cfg, accelerator.device)
    check_fp16_denoiser(comps.denoiser, cfg.allow_fp16)
    family.configure(comps, cfg)
    validation_cond = None
    if cfg.validation_prompt:
        validation_cond = family.encode_prompts(comps, [cfg.validation_prompt], with_negative=True)
    data = prepare_data(cfg, family, comps, accelerator)
    dataset, num_samples = data.dataset, len(data)
    if cfg.cache_latents:
        family.release_encoders(comps, keep_for_validation=bool(cfg.validation_prompt))
        from diffusers.training_utils import free_memory

        free_memory()

    denoiser = comps.denoiser
    lora_config = adapters.add_lora(
        denoiser, rank=cfg.rank, alpha=cfg.effective_lora_alpha, dropout=cfg.lora_dropout,
        targets=family.lora_targets(denoiser, cfg), seed=cfg.seed,
    )
    backbone_names = adapters.unfreeze_backbone(denoiser, family.backbone_patterns(cfg))
    extra_groups = [(label, [n for n in adapters.unfreeze_backbone(denoiser, patterns) if n not in backbone_names], lr)
                    for label, patterns, lr in family.extra_trainable(cfg)]  # a weight belongs to one group
    saved_backbone = backbone_names + [n for _, names, _ in extra_groups for n in names]
    adapters.cast_trainable_to_fp32(denoiser, under_autocast=cfg.mixed_precision != "no")
    checkpointing = cfg.gradient_checkpointing
    if checkpointing is None:
        checkpointing = family.gradient_checkpointing_default
    if checkpointing:
        family.enable_gradient_checkpointing(denoiser)
    mismatches = audit_precision(comps, family.expected_dtypes(comps, cfg), allow_fp16=cfg.allow_fp16)
    if mismatches:
        log("warning: " + format_audit(mismatches) + f"\n  (full list: {out / PRECISION_AUDIT_FILE})")
        if accelerator.is_main_process:
            write_json_atomic(out / PRECISION_AUDIT_FILE, mismatches)
    patched = patch_model(denoiser, **_kernel_switches(cfg), device=accelerator.device)
    kernels = kernel_runtime(denoiser)
    log(_describe_kernels(patched, kernels))
    if injector is not None:
        log(f"fault drill active: --inject_faults {cfg.inject_faults}")
        if injector.broken_attention:
            install_broken_attention()
        if injector.broken_kernel and not install_sample_mixing_modulate(kernels):
            log("warning: --inject_faults broken_kernel has nothing to break: the modulate kernel is not patched "
                "(use --kernels on)")
    if cfg.attention_canary:
        attention_canary(denoiser, accelerator.device, cfg.weight_dtype, log)
        denoiser.zero_grad(set_to_none=True)
    world = accelerator.num_processes
    lr_scale = cfg.gradient_accumulation_steps * cfg.train_batch_size * world if cfg.scale_lr else 1
    groups = adapters.build_param_groups(
        denoiser, learning_rate=cfg.learning_rate * lr_scale, backbone_names=backbone_names,
        backbone_learning_rate=cfg.backbone_learning_rate * lr_scale, weight_decay=cfg.adam_weight_decay,
        loraplus_lr_ratio=cfg.loraplus_lr_ratio,
        extra_groups=[(label, names, lr * lr_scale) for label, names, lr in extra_groups],
    )
    group_info = adapters.describe_groups(groups)
    log("trainable parameter groups:\n" + adapters.format_groups(group_info))

    order = batch_lib.EpochBatches(num_samples, cfg.train_batch_size, seed=cfg.seed, rank=accelerator.process_index,
                                   world_size=world, random_flip=cfg.random_flip, groups=data.groups)
    updates_per_epoch = math.ceil(len(order) / cfg.gradient_accumulation_steps)
    max_steps = cfg.max_train_steps or cfg.num_train_epochs * updates_per_epoch
    optimizer, fused = make_optimizer(cfg, groups, accelerator.device)
    lr_scheduler = make_lr_scheduler(cfg, optimizer, max_steps)
    interval = max(1, min(10, cfg.validation_steps, cfg.max_consecutive_skips))
    guard = StepGuard(
        optimizer, lr_scheduler.lr_lambdas, max_steps, accelerator.device, enabled=cfg.finite_guard, fused=fused,
        interval=interval, max_consecutive_skips=cfg.max_consecutive_skips, rollback_lr_factor=cfg.rollback_lr_factor,
        max_rollbacks=cfg.max_rollbacks, spike_sigma=cfg.skip_loss_spikes, world_size=world,
    )
    denoiser, optimizer = accelerator.prepare(denoiser, optimizer)
    _register_state_hooks(accelerator, guard)

    generator = torch.Generator(device=accelerator.device).manual_seed(cfg.seed * 1000 + accelerator.process_index)
    state = RunState()
    if cfg.resume_from_checkpoint and resume is None:
        log("no complete checkpoint found; starting from scratch")
    if resume is not None:
        saved = load_checkpoint(accelerator, resume, generator)
        guard.load_state_dict(saved["guard"])  # after load_state: it re-installs device LR tensors
        kernels.load_state_dict(saved["kernels"])
        state = RunState(**saved["run"])
        log(f"resumed from {resume} at step {state.global_step}")
    if accelerator.is_main_process and cfg.report_to != "none":
        accelerator.init_trackers(cfg.tracker_project_name, config={k: str(v) for k, v in config_dict(cfg).items()})
    recovery = Recovery(guard=guard, accelerator=accelerator, family=family, comps=comps, cfg=cfg, data=data,
                        order=order, injector=injector, log=log)
    recovery.start(accelerator.unwrap_model(denoiser), state.global_step)

    log(f"training: {num_samples} samples, {world} process(es), batch {cfg.train_batch_size} x accumulation "
        f"{cfg.gradient_accumulation_steps}, {max_steps} updates")
    from tqdm.auto import tqdm

    progress = tqdm(total=max_steps, initial=state.global_step, disable=not accelerator.is_main_process, desc="steps")
    denoiser.train()
    micro_losses = torch.zeros((), device=accelerator.device)
    kernel_veto = False  # a kernel failed its check during this update: skip it
    update_starts = True  # the next micro-batch is the first of an update
    window_start = time.perf_counter()
    train_started = time.perf_counter()
    steps_at_start = state.global_step
    last_window = None  # the reading of the last check window, for the run's verdict
    sync_audit = SyncAudit.from_env(accelerator.device)  # DIT_LORA_SYNC_DEBUG=1: the step must never sync
    try:
        while state.global_step < max_steps:
            loader = batch_lib.epoch_loader(dataset, order, state.epoch, state.batch_in_epoch, cfg.dataloader_num_workers)
            for batch in loader:
                step = state.global_step + 1  # the update this micro-batch contributes to (1-based, as logged)
                slot = (step - 1) % interval
                checking = update_starts and kernels.due(step)  # first micro-batch only
                update_starts = False
                if checking:
                    kernels.arm(step)
                recovery.record(slot, step, state.epoch, state.batch_in_epoch, generator)
                with sync_audit.step(), accelerator.accumulate(denoiser):
                    batch = batch_to_device(batch, accelerator.device, family, comps, data.cached)
                    if injector is not None:
                        batch = injector.batch(step, batch)
                    with injector.active(step, denoiser) if injector is not None else contextlib.nullcontext():
                        with accelerator.autocast():
                            loss = family.compute_loss(comps, denoiser, batch, generator, cfg)
                        if injector is not None:
                            loss = injector.loss(step, loss)
                        accelerator.backward(loss)
                    if checking:  # sampled steps only: this compares on the host
                        with sync_audit.allowed():
                            kernel_veto = kernels.finish_check(step) or kernel_veto
                    micro_losses += loss.detach() / cfg.gradient_accumulation_steps
                    state.batch_in_epoch += 1
                    state.samples_seen += len(batch["sample_index"]) * world
                    if accelerator.sync_gradients:
                        norm = _clip(accelerator, denoiser, cfg.max_grad_norm)
                        guard.step(optimizer, optimizer.optimizer, micro_losses, norm, slot, accelerator.scaler,
                                   veto=kernel_veto)
                        micro_losses.zero_()
                        kernel_veto, update_starts = False, True
                    optimizer.zero_grad(set_to_none=True)
                fault_point("micro_batch", state.batch_in_epoch + state.epoch * len(order))  # crash tests only
                if not accelerator.sync_gradients:
                    continue
                state.global_step += 1
                progress.update(1)
                if on_step is not None:
                    on_step(state.global_step, accelerator.unwrap_model(denoiser), optimizer.optimizer)
                if state.global_step % interval == 0 or state.global_step == max_steps:
                    # The only host reads of the guard: once per check interval, never per step.
                    reading = last_window = guard.read()
                    _log_window(accelerator, progress, state, reading, guard,
                                (time.perf_counter() - window_start) / max(1, reading.window_steps))
                    recovery.at_check(state.global_step, reading, denoiser)
                    window_start = time.perf_counter()
                if cfg.checkpointing_steps and state.global_step % cfg.checkpointing_steps == 0:
                    save_checkpoint(accelerator, out, state.global_step,
                                    {"run": vars(state), "guard": guard.state_dict(), "kernels": kernels.state_dict()},
                                    generator, cfg.checkpoints_total_limit, log=log)
                if validation_cond is not None and state.global_step % cfg.validation_steps == 0 \
                        and state.global_step < max_steps:
                    _validate(accelerator, family, comps, denoiser, validation_cond, cfg, f"step{state.global_step}")
                if state.global_step >= max_steps:
                    break
            else:
                state.epoch += 1
                state.batch_in_epoch = 0
    except RunStopped:
        progress.close()
        _finish(accelerator, cfg, family, comps, denoiser, lora_config, saved_backbone, state, None,
                time.perf_counter() - train_started, time.perf_counter() - started,
                state.global_step - steps_at_start, group_info, guard, recovery, data, stopped=True)
        raise
    progress.close()
    train_time = time.perf_counter() - train_started
    verdict = recovery.verdict(guard.read(), last_window, state.global_step)
    summary = _finish(accelerator, cfg, family, comps, denoiser, lora_config, saved_backbone, state, validation_cond,
                      train_time, time.perf_counter() - started, state.global_step - steps_at_start, group_info,
                      guard, recovery, data, verdict=verdict)
    if verdict is not None:
        raise RunUnhealthy(verdict)
    return summary


def _log_window(accelerator, progress, state: RunState, reading, guard: StepGuard, step_time: float) -> None:
    """Record one check interval in the progress bar, the trackers and the loss history."""
    state.skipped_steps = reading.skipped
    state.rollbacks = len(guard.rollbacks)
    lr, grad_norm = reading.learning_rates[0], reading.grad_norm
    if reading.window_loss is not None:
        state.loss_history.append([state.global_step, reading.window_loss])
    postfix = {"loss": f"{reading.window_loss:.4f}" if reading.window_loss is not None else "skipped",
               "lr": f"{lr:.2e}", "grad_norm": f"{grad_norm:.3f}", "step_s": f"{step_time:.3f}"}
    if reading.skipped:
        postfix.update(skipped=reading.skipped, nan_loss=reading.nonfinite_losses, nan_grad=reading.nonfinite_grads)
    if guard.rollbacks:
        postfix["rollbacks"] = len(guard.rollbacks)
    progress.set_postfix(postfix)
    values = {"lr": lr, "step_time_s": step_time, "skipped_steps": reading.skipped, "rollbacks": len(guard.rollbacks),
              "nonfinite_losses": reading.nonfinite_losses, "nonfinite_grads": reading.nonfinite_grads,
              "loss_spikes": reading.loss_spikes}
    if reading.window_loss is not None:
        values["loss"] = reading.window_loss
    if math.isfinite(grad_norm):
        values["grad_norm"] = grad_norm
    accelerator.log(values, step=state.global_step)


def _clip(accelerator, model, max_norm: float) -> torch.Tensor:
    """Total gradient norm (all ranks agree: DDP grads are already reduced), clipped when max_norm > 0.

    Under fp16 the gradients are unscaled here even without clipping: that fills GradScaler's
    ``found_inf``, into which the guard folds its skip decision (left empty, the scaler would
    decide alone at its step and apply an update the guard skipped).
    """
    params = [p for p in model.parameters() if p.grad is not None]
    if max_norm > 0:
        return accelerator.clip_grad_norm_(params, max_norm)
    if accelerator.scaler is not None:
        accelerator.unscale_gradients()
    return torch.nn.utils.get_total_norm([p.grad for p in params])


def _register_state_hooks(accelerator, guard: StepGuard) -> None:
    """Checkpoint only trainable weights (safetensors), not the frozen multi-GB base model, plus the guard's snapshot."""
    from safetensors.torch import load_file, save_file

    from .checkpoint import GUARD_SNAPSHOT_FILE, TRAINABLE_FILE

    def save_hook(models, weights, output_dir):
        model = accelerator.unwrap_model(models[0])
        if accelerator.is_main_process:
            trainable = {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}
            assert_finite(trainable, f"checkpoint {output_dir}")  # the guard makes this unreachable; never write NaN
            save_file(trainable, str(Path(output_dir) / TRAINABLE_FILE))
            snapshot = guard.snapshot_tensors(model)
            if snapshot:
                assert_finite(snapshot, f"checkpoint {output_dir} (rollback snapshot)")
                save_file(snapshot, str(Path(output_dir) / GUARD_SNAPSHOT_FILE))
        weights.clear()

    def load_hook(models, input_dir):
        model = accelerator.unwrap_model(models.pop(0))
        state = load_file(str(Path(input_dir) / TRAINABLE_FILE))
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value)
        if (Path(input_dir) / GUARD_SNAPSHOT_FILE).is_file():
            guard.load_snapshot_tensors(model, load_file(str(Path(input_dir) / GUARD_SNAPSHOT_FILE)))

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)


def _validate(accelerator, family, comps, denoiser, cond, cfg, tag: str) -> list[Path]:
    if not accelerator.is_main_process:
        return []
    model = accelerator.unwrap_model(denoiser)
    model.eval()
    try:
        with accelerator.autocast():
            images = family.generate(comps, model, cond, cfg, seed=cfg.seed)
    finally:
        model.train()
    folder = Path(cfg.output_dir) / "samples"
    folder.mkdir(parents=True, exist_ok=True)
    return [family.save_sample(item, folder / f"{tag}_{i}") for i, item in enumerate(images)]


def _kernel_switches(cfg: TrainConfig) -> dict[str, Any]:
    """patch_model's switches from the recipe flags."""
    return {
        "kernels": cfg.kernels, "modulate": not cfg.disable_modulate_kernel,
        "layernorm": not cfg.disable_layernorm_kernel, "linear_attention": not cfg.disable_linear_attention_kernel,
        "attention_backend": cfg.attention_backend, "flashattn": not cfg.disable_flashattn,
        "check_interval": cfg.kernel_check_interval,
    }


def _describe_kernels(counts: dict[str, int], runtime) -> str:
    patched = ", ".join(f"{name} x{n}" for name, n in counts.items() if n) or "nothing"
    backend = runtime.attention_backend.name if runtime.attention_backend is not None else "diffusers' own"
    # patch_model has already logged its notes once (they are in train_summary.json too)
    return f"kernels: patched {patched}; attention backend: {backend}"


def _peak_memory_bytes(device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _finish(accelerator, cfg, family, comps, denoiser, lora_config, backbone_names, state, validation_cond,
            train_time, wall_time, steps_this_run, group_info, guard, recovery, data, stopped: bool = False,
            verdict: str | None = None) -> dict[str, Any]:
    """Write the adapter, final samples, loss curve, summary and card (the adapter only, when stopped).

    ``verdict`` (from :meth:`Recovery.verdict`) labels a run that skipped most of its updates: its
    summary and card say so, and it is not pushed.
    """
    out = Path(cfg.output_dir)
    accelerator.wait_for_everyone()
    model = accelerator.unwrap_model(denoiser)
    reading = guard.read()
    state.skipped_steps, state.rollbacks = reading.skipped, len(guard.rollbacks)
    summary: dict[str, Any] = {}
    if accelerator.is_main_process:
        lora_state, backbone = adapters.split_trainable_state(model, backbone_names)
        metadata = model.peft_config["default"].to_dict()
        patterns = family.backbone_patterns(cfg) + [p for _, pats, _ in family.extra_trainable(cfg) for p in pats]
        written = write_adapter(family, out, lora_state, metadata, backbone, patterns)
        print(f"adapter written: {', '.join(str(p) for p in written)}", flush=True)
        sample_files: list[Path] = []
        if cfg.validation_prompt and not stopped:
            # The trained copy is saved; move it off the accelerator so base + fresh pipeline fit.
            model.to("cpu")
            # Final samples come from a fresh pipeline with the saved adapter loaded by the consumer itself.
            pipe = family.load_pipeline_with_adapter(cfg, out, accelerator.device)
            images = family.generate_with_pipeline(pipe, cfg.validation_prompt, cfg, cfg.seed, cfg.num_validation_images)
            (out / "samples").mkdir(exist_ok=True)
            sample_files = [family.save_sample(item, out / "samples" / f"final_{i}") for i, item in enumerate(images)]
            del pipe
        steps = [int(s) for s, _ in state.loss_history]
        plot_loss_curve(steps, [l for _, l in state.loss_history], out / LOSS_CURVE_FILE)
        final_loss = state.loss_history[-1][1] if state.loss_history else None
        report_file = out / NONFINITE_REPORT_FILE
        summary = {
            "family": cfg.family,
            "status": "stopped_nonfinite" if stopped else "mostly_skipped" if verdict else "completed",
            "verdict": verdict,
            "steps": state.global_step, "steps_this_run": steps_this_run,
            "samples_seen": state.samples_seen, "wall_time_s": round(wall_time, 3), "train_time_s": round(train_time, 3),
            "steps_per_second": round(steps_this_run / train_time, 4) if train_time > 0 else None,
            "peak_memory_bytes": _peak_memory_bytes(accelerator.device),
            "peak_memory_gib": round(_peak_memory_bytes(accelerator.device) / 2**30, 3), "device": str(accelerator.device),
            "gradient_checkpointing": bool(getattr(model, "is_gradient_checkpointing", False)),
            "final_loss": finite_or_none(final_loss), "skipped_steps": reading.skipped,
            "rollbacks": len(guard.rollbacks), "nonfinite_losses": reading.nonfinite_losses,
            "nonfinite_grads": reading.nonfinite_grads, "loss_spikes": reading.loss_spikes,
            "applied_updates": reading.applied, "rollback_events": guard.rollbacks,
            "nonfinite_report": str(report_file) if report_file.exists() else None,
            "quarantine": data.quarantine,
            "kernels": kernel_runtime(model).summary(kernel_counts(model)) if kernel_runtime(model) else None,
            "num_processes": accelerator.num_processes,
            "engine": accelerator.distributed_type.value,  # what actually ran: NO, MULTI_GPU, MULTI_CPU
            "param_groups": [vars(g) for g in group_info],
            "loss_history": [[s, finite_or_none(l)] for s, l in state.loss_history],
            "adapter": str(out / family.adapter_weight_name), "samples": [str(p) for p in sample_files],
            "config": config_dict(cfg),
        }
        write_json_atomic(out / SUMMARY_FILE, summary)
        if recovery.report is not None:
            recovery.report["status"] = "stopped" if stopped else "completed"
            write_json_atomic(report_file, recovery.report)
        if not stopped:
            _publish(cfg, family, out, summary, sample_files, push=verdict is None)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return summary


def _publish(cfg, family, out: Path, summary: dict, sample_files: list[Path], push: bool = True) -> None:
    """Model card, the list of outputs, and the optional Hub push of a completed run (never of an unhealthy one)."""
    card = write_model_card(family, cfg, out, summary, sample_files)
    where = [("adapter", out / family.adapter_weight_name), ("model card", card), ("summary", out / SUMMARY_FILE),
             ("loss curve", out / LOSS_CURVE_FILE)] + [("sample", p) for p in sample_files]
    where += [("checkpoint", p) for _, p in complete_checkpoints(out)]
    if cfg.report_to != "none":
        where.append((f"{cfg.report_to} logs", out / cfg.logging_dir))
    width = max(len(k) for k, _ in where)
    head = "finished" if push else "finished, but most updates were skipped (see the verdict below)"
    print(f"\n{head}: " + "\n  ".join([""] + [f"{k:<{width}} {v}" for k, v in where]), flush=True)
    if cfg.push_to_hub and push:
        from ..output.hub import push_adapter

        url = push_adapter(out, cfg.hub_model_id, private=cfg.hub_private)
        print(f"pushed to {url}", flush=True)


__all__ = ["RunState", "check_output_dir", "complete_checkpoints", "train"]
