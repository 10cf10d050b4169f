"""The first stage of a run: ``setup(cfg) -> Run``, everything before the first step.

:class:`Run` holds what the later stages (:func:`~.loop.train_step`, :func:`~.loop.after_update`,
:func:`~.finish.finish`) share: the accelerator, the family spec and its components, the data, the engine
(:mod:`.engine`: DDP or FSDP2, which the stages ask instead of asking which one it is), the levers
(``features``: :mod:`.features`, :mod:`.levers`), the wrapped model, optimizer, schedule, guard, recovery and the
counters a checkpoint saves. ``setup`` is itself a sequence of named stages, in the order they must run; each
returns what it builds, and each may stop the run with a :class:`~dit_lora.core.errors.UserError` before anything
expensive happens after it:

0. :func:`resolve_for_training` (the entry points, before any Accelerator exists): the engine and the folders
   judged, once for the run (:class:`Checked` carries the verdict; setup judges neither again), then the config
   resolved;
1. :func:`_start`: the engine's option checks, the accelerator, the output folder, the family's config checks, the
   memory plan, the drills and debug modes (:class:`~.drills.Hooks`);
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
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.dataset_config import with_data_sets
from dit_lora.config.schema import TrainingOptions
from dit_lora.contract import spec as fallback
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.engine import EngineChoice, decide_engine
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_json_atomic
from dit_lora.core.progress import say
from dit_lora.data import batches as batch_lib
from dit_lora.data import class_images
from dit_lora.data.data_sets import batch_order, sample_sizes
from dit_lora.data.prepare import prepare_data
from dit_lora.modeling import quantize, trainables
from dit_lora.modeling.quantize import QuantizeError
from dit_lora.modeling.trainables import Trainables
from dit_lora.output.hub import preflight_push
from dit_lora.output.names import PRECISION_AUDIT_FILE
from dit_lora.output.report import config_dict
from dit_lora.output.start_from import load_start_adapter
from dit_lora.plan import make_plan
from dit_lora.plan import report as plan_report  # looked up at call time: tests stand in a small device
from dit_lora.setup.resolve import Resolved, resolve
from dit_lora.training import ema as ema_lib
from dit_lora.training import levers, optim
from dit_lora.training.checkpoint import (  # check_same_trainables: imported from here by callers and tests
    check_resumable,
    check_same_trainables,  # noqa: F401
    load_checkpoint,
    resolve_resume,
)
from dit_lora.training.compile import check_compiler
from dit_lora.training.drills import Hooks
from dit_lora.training.engine import DDPEngine, make_engine
from dit_lora.training.features import Features
from dit_lora.training.guard import StepGuard
from dit_lora.training.host_memory import release_freed_memory, reuse_freed_memory
from dit_lora.training.launch_precision import check_launch_precision
from dit_lora.training.optim import make_lr_scheduler, make_optimizer
from dit_lora.training.output_lock import lock_for_run, main_process_check
from dit_lora.training.precision import audit_precision, check_fp16_model, format_audit
from dit_lora.training.recovery import Recovery
from dit_lora.training.resume_options import check_options, options_record, resume_history
from dit_lora.training.run_folders import (  # check_run_folders: imported from here by callers and tests
    check_output_dir,
    check_run_folders,
    old_checkpoints,  # noqa: F401
)


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


def check_engine() -> EngineChoice:
    """The launch's engine (:func:`dit_lora.core.engine.decide_engine`: DDP, or FSDP2 from
    accelerate_configs/fsdp2.yaml), judged before anything loads; DeepSpeed and FSDP version 1 are refused in one
    paragraph naming what to use instead (DeepSpeed steps inside its backward: no step could be skipped)."""
    return decide_engine()


@dataclass(frozen=True)
class Checked(Resolved):
    """A config resolved for training (:func:`resolve_for_training`) with what was judged before it resolved: the
    launch's engine, and the run's folders (for these options). Setup judges neither again."""

    engine: EngineChoice | None = None
    folders_checked: tuple = ()  # the options check_run_folders judged (_folder_options)


def setup(cfg: TrainConfig | Resolved) -> Run:
    """Build a :class:`Run` ready for its first (or resumed) step; see the module docstring for the stages.

    ``cfg``: what :func:`resolve_for_training` returned (the entry points), a config resolved another way
    (:func:`dit_lora.setup.resolve.resolve`: the engine and folders are judged here), or a config built in code,
    resolved here first (before the Accelerator exists).
    """
    run = _start(_checked(cfg))
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


def _checked(cfg: TrainConfig | Resolved) -> Checked:
    """``cfg`` with the engine and the folders judged, each exactly once for the run."""
    if isinstance(cfg, Checked):
        return cfg
    if isinstance(cfg, Resolved):  # resolved without the checks: judged now, on the resolved options
        engine = check_engine()
        check_run_folders(cfg.config)
        return Checked(cfg.config, cfg.spec, cfg.defaults, engine=engine, folders_checked=_folder_options(cfg.config))
    return resolve_for_training(cfg)


def _folder_options(cfg: TrainConfig) -> tuple:
    """The options :func:`check_run_folders` judges: equal ones need no second look."""
    return (
        cfg.training.output_dir,
        cfg.validation.logging_dir,
        cfg.validation.report_to,
        cfg.data.cache_latents,
        cfg.data.cache_dir,
        cfg.data.train_data_dir,
        cfg.data.validation_data_dir,
        cfg.data.dataset_name,
        getattr(cfg.family_options, "video_folder", None),
    )


def _memory_plan(cfg: TrainConfig, spec: FamilySpec, accelerator, defaults, log, engine: DDPEngine | None = None):
    """Predict the run's peak memory before anything loads; stop when it clearly exceeds the device's.

    ``engine``: the run's (DDP when None; FSDP2: the plan is one rank's: sharded weights and state, blocks parked at
    load). A family the planner does not cover, or a plan that cannot be made, is a note, never a stop. Called on
    the main process only (:func:`_start`): every rank trains the same step, so the other ranks take its plan and its
    verdict (a trace of a large model is seconds to minutes of host CPU, which N processes would spend N times on
    the same cores, and the main process's device is the one measured).
    """
    device = accelerator.device
    engine = engine if engine is not None else make_engine(EngineChoice("ddp", ()))
    try:
        capacity = plan_report.device_memory(device)
        # the run's own checkpointing setting, and the other too when it does not fit (the advice weighs both)
        plan = make_plan(
            cfg,
            spec,
            device=device.type,
            num_processes=accelerator.num_processes,
            entry=defaults.entry,
            both_settings=False,
            capacity=capacity,
            engine=engine.name,
            cache=True,
        )
    except QuantizeError:  # a refusal, not a planning problem
        raise
    except (NotImplementedError, UserError) as err:
        log(f"memory plan: none ({err})")
        return None
    log(
        f"memory plan: predicted peak {plan.peak_memory_bytes / 2**30:.2f} GiB per process"
        + engine.plan_note(accelerator.num_processes)
        + " of "
        f"{capacity / 2**30:.2f} GiB on {device.type}, {plan.flops_per_update() / 1e12:.3g} TFLOP per update "
        "(`dit-lora plan` for the details)"
    )
    narrow = plan_report.check_fits(plan, capacity, plan_report.device_name(device))
    if narrow:  # it fits only inside the plan's error: the run starts, told the risk and the flags that keep it free
        log(narrow)
    return plan


def resolve_for_training(cfg: TrainConfig) -> Checked:
    """A parsed (or code-built) config resolved for training (:func:`dit_lora.setup.resolve.resolve`): the engine and
    the folders are judged first (nothing is built for a launch or a folder that cannot work), then the demo, the
    defaults and the family's checks; the folders again only when resolving changed the options they depend on. The
    entry points call it before the Accelerator exists; setup judges neither again."""
    engine = check_engine()
    cfg = with_data_sets(cfg)  # built in code: its dataset config read now, once (the parser read a parsed one)
    check_run_folders(cfg)  # a read-only folder is one paragraph, before the demo is built
    resolved = resolve(cfg)
    if _folder_options(resolved.config) != _folder_options(cfg):  # the defaults or the demo chose other folders
        check_run_folders(resolved.config)
    return Checked(
        resolved.config,
        resolved.spec,
        resolved.defaults,
        engine=engine,
        folders_checked=_folder_options(resolved.config),
    )


def _start(checked: Checked) -> Run:
    """Set a run up before any model loads, in named stages: the option checks, the process group, the output
    folder (lock, resume, push), then the checks and notes that need the resolved options."""
    from accelerate.utils import set_seed

    cfg, spec, defaults = checked.config, checked.spec, checked.defaults
    assert checked.engine is not None  # a Checked is built with the engine it judged
    engine = make_engine(checked.engine)
    engine.check_options(cfg)  # before the lock, the accelerator and the model
    ema_lib.check_options(cfg)
    out = Path(cfg.training.output_dir)
    accelerator = engine.build_accelerator(cfg, out)
    log = _main_process_log(accelerator)
    check_launch_precision(
        cfg.training.mixed_precision, log
    )  # `dit-lora launch --mixed_precision X`: never silently ignored
    note = engine.start_note()
    if note:
        log(note)
    resume = _claim_output_dir(cfg, out, accelerator, engine.sharded, log)
    for line in defaults.lines() if defaults is not None else ():
        log(line)
    check_options(resume, cfg, log)  # the resolved options against the checkpoint's, before anything loads
    check_compiler(cfg.performance.compile, accelerator.device.type)
    # before anything loads (the plan also checks backbone training)
    quantize.check_config(cfg, accelerator.device.type, spec)
    plan = None
    if not cfg.guards.ignore_memory_plan:  # made once a launch, by the main process: every rank's is the same
        plan = main_process_check(
            accelerator,
            lambda: _memory_plan(cfg, spec, accelerator, defaults, log, engine),
            what="planning the run's memory",
            share_result=True,
        )
    hooks = Hooks.from_config(
        cfg.guards.inject_faults, accelerator.process_index, accelerator.device
    )  # fail before loading
    _log_start_notes(cfg, spec, log)
    sizes = sample_sizes(cfg, spec)[0] if cfg.validation.prompts else {}  # once: the file may change mid-run
    if cfg.training.allow_tf32 and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
    set_seed(cfg.training.seed)
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
    return Run(
        cfg=cfg,
        accelerator=accelerator,
        spec=spec,
        log=log,
        out=out,
        resume=resume,
        hooks=hooks,
        engine=engine,
        features=levers.for_run(hooks),
        record=RunRecord(started=time.perf_counter(), defaults=defaults, plan=plan, sample_sizes=sizes),
    )


def _main_process_log(accelerator) -> Callable[[str], None]:
    """The run's ``log``: a line from the main process only, above the step bar while one is drawn."""

    def log(msg: str) -> None:
        if accelerator.is_main_process:
            say(msg)  # above the step bar while one is drawn

    return log


def _claim_output_dir(cfg: TrainConfig, out: Path, accelerator, sharded: bool, log) -> Path | None:
    """Lock ``--output_dir`` for this run, judge it and find the checkpoint to resume from (refused now when it
    cannot be resumed), and check that a ``--push_to_hub`` can happen; returns that checkpoint or None."""
    # One run per --output_dir, held until exit. Taken before the folder is judged: a run that finished or pruned
    # between a check and the lock would otherwise be overwritten, or its checkpoints read while they change.
    lock_note = lock_for_run(out, accelerator)
    if lock_note:
        log(lock_note)

    def judge_folder() -> Path | None:
        note = check_output_dir(cfg)
        if note:
            log(note)
        return resolve_resume(
            out, cfg.checkpoints.resume_from_checkpoint, log
        )  # a bad path fails before any model loads

    resume = main_process_check(accelerator, judge_folder, what=f"checking --output_dir `{out}`", share_result=True)
    if resume is not None:  # another process count or engine: refused now, not after the model has loaded
        check_resumable(resume, accelerator.num_processes, sharded=sharded)
    if cfg.hub.push_to_hub:  # a push that cannot happen stops the run before training, not after it
        push_note = main_process_check(accelerator, lambda: preflight_push(cfg.hub, out), what="checking --push_to_hub")
        if push_note:
            log(push_note)
    return resume


def _log_start_notes(cfg: TrainConfig, spec, log) -> None:
    """What the parser decided in the user's place (``cfg.notes``), the family's start notes and precision warnings,
    and the quantized base and text encoder, one line each."""
    for note in cfg.notes:
        log(note)
    for note in fallback.start_notes(spec, cfg):
        log(note)
    for note in fallback.precision_notes(spec, cfg):
        log(f"warning: {note}")
    rate = optim.learning_rate_warning(cfg.training)
    if rate:
        log(f"warning: {rate}")
    if quantize.enabled(cfg.model):
        log(f"quantized base (--quantize_base {cfg.model.quantize_base}): {quantize.describe(cfg.model)}")
    if cfg.model.quantize_text_encoder:
        log(f"quantized text encoder (--quantize_text_encoder): {quantize.describe_text_encoder(cfg.model)}")


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
    if class_images.missing(cfg):  # prior preservation's missing class images, from the whole base model
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
        run.comps, fallback.expected_dtypes(spec, run.comps, cfg), allow_fp16=cfg.training.allow_fp16
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


__all__ = [
    "Checked",
    "Run",
    "RunRecord",
    "RunState",
    "Schedule",
    "UpdateState",
    "check_engine",
    "check_output_dir",
    "resolve_for_training",
    "setup",
]
