"""The first stage of a run: ``setup(cfg) -> Run``, everything before the first step.

:class:`~.run_parts.Run` holds what the later stages (:func:`~.loop.train_step`, :func:`~.loop.after_update`,
:func:`~.finish.finish`) share: the accelerator, the family spec and its components, the data, the engine
(:mod:`.engine`: DDP or FSDP2, which the stages ask instead of asking which one it is), the levers
(``features``: :mod:`.features`, :mod:`.levers`), the wrapped model, optimizer, schedule, guard, recovery and the
counters a checkpoint saves. ``setup`` is itself a sequence of named stages, in the order they must run; each
returns what it builds, and each may stop the run with a :class:`~dit_lora.core.errors.UserError` before anything
expensive happens after it:

0. :func:`~.run_start.resolve_for_training` (the entry points, before any Accelerator exists): the engine and the
   folders judged, once for the run (:class:`~.run_start.Checked` carries the verdict; setup judges neither again),
   then the config resolved;
1. :func:`~.run_start.start_run`: the engine's option checks, the accelerator, the output folder, the family's config
   checks, the memory plan, the drills and debug modes (:class:`~.drills.Hooks`);
2. :func:`_load`: components, validation prompt, data (screening, cache), encoders released;
3. :func:`_add_trainables`: LoRA, unfrozen backbone groups, fp32 masters, checkpointing, precision audit;
4. :func:`_install_kernels`: the levers of the ``kernels`` stage: fused kernels, attention backend, drills that
   break them, the attention canary, then ``--compile`` (after everything that changes the modules);
5. :func:`_build_optimizer`: sharding (FSDP2), parameter groups, batch order, optimizer, schedule, guard, the levers
   of the ``model`` stage (block swap, activation offloading), the engine's ``prepare``;
6. :func:`_restore`: a checkpoint, when resuming, then the recovery, the ``restore`` stage's levers (the EMA) and
   the first snapshot.

The order matters for exact resume: random draws (LoRA init, the canary) happen in the same order in a
fresh and in a resumed run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.schema import TrainingOptions
from dit_lora.contract import spec as fallback
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_json_atomic
from dit_lora.data import class_images
from dit_lora.data.data_sets import batch_order
from dit_lora.data.prepare import prepare_data
from dit_lora.modeling import trainables
from dit_lora.modeling.trainables import Trainables
from dit_lora.output.names import PRECISION_AUDIT_FILE
from dit_lora.output.report import config_dict
from dit_lora.output.start_from import load_start_adapter
from dit_lora.setup.resolve import Resolved
from dit_lora.training.checkpoint import load_checkpoint
from dit_lora.training.guard import StepGuard
from dit_lora.training.host_memory import release_freed_memory, reuse_freed_memory
from dit_lora.training.optim import make_lr_scheduler, make_optimizer
from dit_lora.training.precision import audit_precision, check_fp16_model, format_audit
from dit_lora.training.recovery import Recovery
from dit_lora.training.resume_options import options_record, resume_history
from dit_lora.training.run_parts import Run, RunState, Schedule, UpdateState
from dit_lora.training.run_start import checked_for_training, start_run


def setup(cfg: TrainConfig | Resolved) -> Run:
    """Build a :class:`Run` ready for its first (or resumed) step; see the module docstring for the stages.

    ``cfg``: what :func:`~.run_start.resolve_for_training` returned (the entry points), a config resolved another way
    (:func:`dit_lora.setup.resolve.resolve`: the engine and folders are judged here), or a config built in code,
    resolved here first (before the Accelerator exists).
    """
    run = start_run(checked_for_training(cfg))
    run.comps, run.data, run.validation_conds = _load(run)
    run.trainables = _add_trainables(run)
    _install_kernels(run)
    run.model, run.optimizer, run.schedule, run.guard = _build_optimizer(run)
    _restore(run)
    if run.cfg.performance.cpu_reuse_memory and run.accelerator.device.type == "cpu":
        # Loading and caching ran with glibc's defaults (each once); what they freed goes back, then the steps
        # keep their own working set.
        release_freed_memory()
        note = reuse_freed_memory()
        if note:
            run.log(note)
    return run


def _load(run: Run) -> tuple[Any, Any, list[tuple[str, dict]]]:
    """The family's components, the validation prompts' inputs and the data (screened, maybe cached); returns
    (components, data, [(prompt, its validation inputs)])."""
    cfg, spec, device = run.cfg, run.spec, run.accelerator.device
    comps = spec.model.load_components(cfg, device)
    check_fp16_model(comps.model, cfg.training.allow_fp16)
    fallback.configure(spec, comps, cfg)
    trainables.check_adapter_rank(comps.model, spec, cfg)  # before the data and its cache, not after them
    validation_conds = []
    if cfg.validation.prompts:  # prepared while the encoders are loaded: building the data may release them
        samples = fallback.require(spec, "samples", "--validation_prompt")
        validation_conds = [
            (prompt, samples.validation_inputs(comps, cfg.validation.one_prompt(prompt)))
            for prompt in cfg.validation.prompts
        ]
    if class_images.missing(cfg.data):  # prior preservation's missing class images, from the whole base model
        run.engine.bring_waiting(comps.model, spec.info.block_lists, cfg.performance.blocks_to_swap, device, run.log)
        class_images.generate(cfg, spec, comps, run.accelerator, run.log)
    data = spec.data.build_data(cfg, spec, comps, run.accelerator)
    if data is None:  # the family keeps the standard data path
        data = prepare_data(cfg, spec, comps, run.accelerator)
    # the blocks that waited in host memory for the cache (FSDP2: sharded from there)
    run.engine.bring_waiting(comps.model, spec.info.block_lists, cfg.performance.blocks_to_swap, device, run.log)
    return comps, data, validation_conds


def _add_trainables(run: Run) -> Trainables:
    """The adapter, backbone groups, fp32 masters and checkpointing on the model (returned), and the precision
    audit."""
    cfg, spec = run.cfg, run.spec
    made = trainables.attach_trainables(run.comps.model, spec, cfg)
    for note in made.notes:
        run.log(note)
    if cfg.lora.network_weights and run.resume is None:  # a resume's checkpoint holds the adapter it started from
        run.log(load_start_adapter(run.comps.model, cfg.lora.network_weights, pipeline_class(spec), cfg.lora.lora_type))
    mismatches = audit_precision(
        run.comps, fallback.expected_dtypes(spec, run.comps, cfg.weight_dtype), allow_fp16=cfg.training.allow_fp16
    )
    if mismatches:
        run.log("warning: " + format_audit(mismatches) + f"\n  (full list: {run.out / PRECISION_AUDIT_FILE})")
        if run.accelerator.is_main_process:
            write_json_atomic(run.out / PRECISION_AUDIT_FILE, mismatches)
    return made


def pipeline_class(spec: FamilySpec) -> Any | None:
    """The family's diffusers pipeline class (its LoRA converters), or None (a video LLM's transformers model)."""
    import diffusers

    return getattr(diffusers, spec.info.pipeline_class_name, None)


def _install_kernels(run: Run) -> None:
    """The levers that change the modules, after the trainables (:mod:`.levers`): fused kernels, attention backend,
    the drills that break them, the attention canary, then ``--compile`` (after everything that changes modules)."""
    run.features.install(run, "kernels")


def validation_every_epochs(cfg: TrainConfig, updates_per_epoch: int, log: Callable[[str], Any]) -> TrainConfig:
    """``cfg`` validating every ``--validation_epochs`` epochs: --validation_steps that many epochs' updates."""
    epochs = cfg.validation.validation_epochs or 1
    steps = epochs * updates_per_epoch
    log(f"--validation_epochs {epochs}: validating every {steps} updates ({updates_per_epoch} an epoch)")
    return replace(cfg, validation=replace(cfg.validation, validation_steps=steps))


def _build_optimizer(run: Run) -> tuple[torch.nn.Module, Any, Schedule, StepGuard]:
    """The optimizer's groups, the batch order and the schedule, the optimizer and the guard; the levers that hook
    the model before it is wrapped; the engine's ``prepare``. Returns (model, optimizer, schedule, guard)."""
    cfg, accelerator, model = run.cfg, run.accelerator, run.comps.model
    world = accelerator.num_processes
    # FSDP2: before the groups, the optimizer must hold the sharded (DTensor) parameters
    run.engine.shard(model, run.spec.info, train_backbone=bool(run.trainables.backbone_names), log=run.log)
    order = batch_order(
        run.data,
        cfg.training.train_batch_size,
        seed=cfg.training.seed,
        rank=accelerator.process_index,
        world_size=world,
        random_flip=cfg.data.random_flip,
        caption_dropout=cfg.data.caption_dropout_probability,
    )
    groups = _param_groups(run, model, order.trained_batch(cfg.training.train_batch_size, run.log))
    run.record.group_info = trainables.describe_groups(groups)
    run.log("trainable parameter groups:\n" + trainables.format_groups(run.record.group_info))
    check_accumulation(cfg.training, len(order), len(run.data), world)
    updates_per_epoch = math.ceil(len(order) / cfg.training.gradient_accumulation_steps)
    if cfg.validation.validation_epochs is not None:  # diffusers' flag, in this data's updates
        cfg = run.cfg = validation_every_epochs(cfg, updates_per_epoch, run.log)
    max_steps = cfg.training.max_train_steps or cfg.training.num_train_epochs * updates_per_epoch
    optimizer, fused = make_optimizer(cfg.training, groups, accelerator.device)
    schedule = Schedule(
        order=order,
        max_steps=max_steps,
        interval=max(1, min(10, cfg.validation.validation_steps, cfg.guards.max_consecutive_skips)),
        lr_scheduler=make_lr_scheduler(cfg.training, optimizer, max_steps),
    )
    guard = StepGuard.for_run(
        cfg.guards,
        optimizer,
        schedule.lr_scheduler.lr_lambdas,
        max_steps,
        accelerator.device,
        fused=fused,
        interval=schedule.interval,
        world_size=world,
    )
    run.engine.before_wrap(model)
    # block swap, activation offloading: hooked now that LoRA is attached, before prepare's .to(device)
    run.features.install(run, "model")
    model, optimizer = run.engine.prepare(model, optimizer, guard)
    return model, optimizer, schedule, guard


def _param_groups(run: Run, model: torch.nn.Module, batch: int) -> list:
    """The optimizer's parameter groups; ``batch``: the micro-batch that trains (--scale_lr scales by it)."""
    cfg, made = run.cfg, run.trainables
    lr_scale = (
        cfg.training.gradient_accumulation_steps * batch * run.accelerator.num_processes if cfg.training.scale_lr else 1
    )
    return trainables.build_param_groups(
        model,
        learning_rate=cfg.training.learning_rate * lr_scale,
        backbone_names=made.backbone_names,
        backbone_learning_rate=cfg.lora.backbone_learning_rate * lr_scale,
        weight_decay=cfg.training.adam_weight_decay,
        loraplus_lr_ratio=cfg.lora.loraplus_lr_ratio,
        extra_groups=[(label, names, lr * lr_scale) for label, names, lr in made.extra_groups],
    )


def check_accumulation(training: TrainingOptions, batches_per_epoch: int, samples: int, world: int) -> None:
    """Refuse an update that needs more micro-batches than an epoch has (``training``: the run's ``cfg.training``).

    The loop counts micro-batches across epochs (no prepared dataloader ends an accumulation at an epoch's end), so
    such an update would see every sample more than once and (at 1e9) never happen: a mistyped value, not a plan.
    """
    if training.gradient_accumulation_steps <= batches_per_epoch:
        return
    raise UserError(
        f"--gradient_accumulation_steps {training.gradient_accumulation_steps} asks for more micro-batches per "
        f"optimizer update than an epoch has: {samples} usable samples in batches of --train_batch_size "
        f"{training.train_batch_size} on {world} process(es) are {batches_per_epoch} micro-batch(es) per process and "
        f"epoch, so one update would repeat samples (or, this large, never come). Use at most "
        f"--gradient_accumulation_steps {batches_per_epoch}, or add data."
    )


def _restore(run: Run) -> None:
    """A checkpoint, when resuming; the options record; the recovery, the levers of the restore stage (the EMA) and
    the first snapshot; the update's state."""
    cfg, accelerator = run.cfg, run.accelerator
    generator = torch.Generator(device=accelerator.device).manual_seed(
        cfg.training.seed * 1000 + accelerator.process_index
    )
    if cfg.checkpoints.resume_from_checkpoint and run.resume is None:
        run.log("no complete checkpoint found; starting from scratch")
    if run.resume is not None:
        run.record.changed_options = resume_history(run.resume, cfg, run.data.samples, run.log)
        engine = run.engine
        saved = load_checkpoint(
            accelerator, run.resume, generator, read_state=engine.load_state, sharded=engine.sharded
        )
        run.guard.load_state_dict(saved["guard"])  # after load_state: it re-installs device LR tensors
        run.features.load_state_dict(saved)  # the kernels' state
        run.state = RunState(**saved["run"])
        run.log(f"resumed from {run.resume} at step {run.state.global_step}")
    run.record.options = options_record(cfg, run.data.samples, run.record.changed_options)
    if accelerator.is_main_process and cfg.validation.report_to != "none":
        accelerator.init_trackers(
            cfg.validation.tracker_project_name, config={k: str(v) for k, v in config_dict(cfg).items()}
        )
    run.recovery = Recovery(
        guard=run.guard,
        accelerator=accelerator,
        spec=run.spec,
        comps=run.comps,
        cfg=cfg,
        data=run.data,
        order=run.schedule.order,
        injector=run.hooks.injector,
        load_batch=run.load_batch,
        log=run.log,
        replay=run.engine.replays,
    )
    run.features.install(run, "restore")  # the EMA: before the first snapshot, which it follows
    run.recovery.start(run.engine.unwrap(run.model), run.state.global_step)
    run.update = UpdateState(generator=generator, losses=torch.zeros((), device=accelerator.device))
    start = run.data.sets.prior_start if run.data.sets is not None else None
    counted = (
        f"{len(run.data)} samples" if start is None else f"{start} samples and {len(run.data) - start} class images"
    )
    run.log(
        f"training: {counted}, {accelerator.num_processes} process(es), batch "
        f"{run.schedule.order.largest_batch} x accumulation {cfg.training.gradient_accumulation_steps}, "
        f"{run.schedule.max_steps} updates"
    )
