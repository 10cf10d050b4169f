"""Setup's first stage, before any model loads: the launch's engine and the run's folders judged and the config
resolved (:func:`resolve_for_training`, called by the entry points before any Accelerator exists; :class:`Checked`
carries the verdict), then :func:`start_run`: the engine's option checks, the accelerator, the output folder (lock,
resume, push), the family's config checks, the memory plan and its gate (:func:`_memory_plan`), the drills and debug
modes, the start notes. :func:`~.run.setup` runs the later stages on the :class:`~.run_parts.Run` it returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from dit_lora.config import TrainConfig, optimizers
from dit_lora.config.dataset_config import with_data_sets
from dit_lora.contract import spec as fallback
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.engine import EngineChoice, decide_engine
from dit_lora.core.errors import UserError
from dit_lora.core.progress import say
from dit_lora.data.data_sets import sample_sizes
from dit_lora.modeling import quantize
from dit_lora.modeling.quantize import QuantizeError
from dit_lora.output.hub import preflight_push
from dit_lora.plan import make_plan
from dit_lora.plan import report as plan_report  # looked up at call time: tests stand in a small device
from dit_lora.setup.resolve import Resolved, resolve
from dit_lora.training import ema as ema_lib
from dit_lora.training import levers
from dit_lora.training.checkpoint import check_resumable, resolve_resume
from dit_lora.training.compile import check_compiler
from dit_lora.training.drills import Hooks
from dit_lora.training.engine import DDPEngine, make_engine
from dit_lora.training.launch_precision import check_launch_precision
from dit_lora.training.output_lock import lock_for_run, main_process_check
from dit_lora.training.resume_options import check_options
from dit_lora.training.run_folders import check_output_dir, check_run_folders
from dit_lora.training.run_parts import Run, RunRecord


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


def checked_for_training(cfg: TrainConfig | Resolved) -> Checked:
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


def _memory_plan(cfg: TrainConfig, spec: FamilySpec, accelerator, defaults, log, engine: DDPEngine | None = None):
    """Predict the run's peak memory before anything loads; stop when it clearly exceeds the device's.

    ``engine``: the run's (DDP when None; FSDP2: the plan is one rank's: sharded weights and state, blocks parked at
    load). A family the planner does not cover, or a plan that cannot be made, is a note, never a stop. Called on
    the main process only (:func:`start_run`): every rank trains the same step, so the other ranks take its plan and its
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


def start_run(checked: Checked) -> Run:
    """Set a run up before any model loads, in named stages: the option checks, the process group, the output
    folder (lock, resume, push), then the checks and notes that need the resolved options."""
    from accelerate.utils import set_seed

    cfg, spec, defaults = checked.config, checked.spec, checked.defaults
    assert checked.engine is not None  # a Checked is built with the engine it judged
    engine = make_engine(checked.engine)
    engine.check_options(cfg)  # before the lock, the accelerator and the model
    ema_lib.check_options(cfg.training, cfg.validation, cfg.explicit)
    out = Path(cfg.training.output_dir)
    accelerator = engine.build_accelerator(cfg.training, cfg.validation, out)
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
    quantize.check_config(cfg.model, cfg.training, accelerator.device.type, spec)
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
        note = check_output_dir(cfg.training, cfg.checkpoints)
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
    rate = optimizers.learning_rate_warning(cfg.training)
    if rate:
        log(f"warning: {rate}")
    if quantize.enabled(cfg.model):
        log(f"quantized base (--quantize_base {cfg.model.quantize_base}): {quantize.describe(cfg.model)}")
    if cfg.model.quantize_text_encoder:
        log(f"quantized text encoder (--quantize_text_encoder): {quantize.describe_text_encoder(cfg.model)}")
