"""The first stage of a run: ``setup(cfg) -> Run``, everything before the first step.

:class:`Run` holds what the later stages (:func:`~.loop.train_step`, :func:`~.loop.after_update`,
:func:`~.finish.finish`) share: the accelerator, the family spec and its components, the data, the
wrapped model, optimizer, guard, recovery, kernel runtime and the counters a checkpoint saves.
``setup`` is itself a sequence of small stages, in the order they must run (each may stop the run with
a :class:`~dit_lora.core.errors.UserError` before anything expensive happens after it):

1. :func:`_start`: engine and output checks, the accelerator, the family's config checks, the drills
   and debug modes (:class:`~.hooks.Hooks`);
2. :func:`_load`: components, validation prompt, data (screening, cache), encoders released;
3. :func:`_add_trainables`: LoRA, unfrozen backbone groups, fp32 masters, checkpointing, precision audit;
4. :func:`_install_kernels`: fused kernels, attention backend, drills that break them, the attention canary,
   then ``--compile`` (:mod:`.compile`: after everything that changes the modules);
5. :func:`_build_optimizer`: parameter groups, batch order, optimizer, schedule, guard, ``accelerator.prepare``;
6. :func:`_restore`: a checkpoint, when resuming, then the recovery and its first snapshot.

The order matters for exact resume: random draws (LoRA init, the canary) happen in the same order in a
fresh and in a resumed run.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.schema import KernelOptions, TrainingOptions
from dit_lora.contract import spec as fallback
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.engine import EngineChoice, decide_engine, plain_cpu_device
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import check_writable, write_json_atomic
from dit_lora.core.progress import say
from dit_lora.data import batches as batch_lib
from dit_lora.data.cache import default_cache_root
from dit_lora.data.prepare import prepare_data
from dit_lora.kernels import kernel_runtime, patch_model
from dit_lora.kernels.monitor import install_sample_mixing_modulate
from dit_lora.modeling import activation_offload, block_swap, cache_parking, quantize, trainables
from dit_lora.modeling.quantize import QuantizeError
from dit_lora.output.adapter import assert_finite
from dit_lora.output.hub import preflight_push
from dit_lora.output.names import ADAPTER_FILES, ADAPTER_INDEX_FILE, PRECISION_AUDIT_FILE
from dit_lora.output.report import config_dict
from dit_lora.plan import make_plan
from dit_lora.plan import report as plan_report  # looked up at call time: tests stand in a small device
from dit_lora.setup.resolve import Resolved, resolve
from dit_lora.training import ema as ema_lib
from dit_lora.training import fsdp2, sharded_checkpoint
from dit_lora.training.canary import attention_canary, canary_in_place, install_broken_attention
from dit_lora.training.checkpoint import (  # check_same_trainables: imported from here by callers and tests
    GUARD_SNAPSHOT_FILE,
    TRAINABLE_FILE,
    check_resumable,
    check_same_trainables,
    load_checkpoint,
    resolve_resume,
)
from dit_lora.training.compile import CompileCounters, check_compiler, compile_model
from dit_lora.training.drills import Hooks
from dit_lora.training.guard import StepGuard
from dit_lora.training.host_memory import release_freed_memory, reuse_freed_memory
from dit_lora.training.launch_precision import check_launch_precision
from dit_lora.training.optim import make_lr_scheduler, make_optimizer
from dit_lora.training.output_lock import lock_for_run, main_process_check
from dit_lora.training.precision import audit_precision, check_fp16_model, format_audit
from dit_lora.training.recovery import Recovery
from dit_lora.training.resume_options import check_options, options_record, resume_history
from dit_lora.training.run_folders import check_folders_apart


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
class Run:
    """Everything the stages of one training run share (built by :func:`setup`)."""

    cfg: TrainConfig
    accelerator: Any
    spec: FamilySpec  # the family's spec
    log: Callable[[str], None]
    out: Path
    started: float  # perf_counter at setup: the summary's wall time
    resume: Path | None
    hooks: Hooks  # drills and debug modes
    defaults: Any = None  # catalogue.defaults.ChosenDefaults: what the run took from the catalogue or the model
    plan: Any = None  # plan.Plan: the predicted peak memory and FLOPs (None with --ignore_memory_plan)
    engine: str = "ddp"  # core.engine: "ddp" (one process, or DDP) or "fsdp2"
    sharded: fsdp2.Sharded | None = None  # FSDP2: the sharded model's engine side (_build_optimizer); None under DDP
    comps: Any = None
    data: Any = None
    validation_cond: dict | None = None
    lora_config: Any = None  # peft.LoraConfig: what attach_trainables attached
    backbone_names: list[str] = field(default_factory=list)
    extra_groups: list = field(default_factory=list)  # (label, weight names, lr) of the family's extra groups
    saved_backbone: list[str] = field(default_factory=list)  # every fully trained weight, extra groups included
    group_info: list = field(default_factory=list)
    kernels: Any = None
    max_steps: int = 0
    interval: int = 1  # the guard's check interval, in updates
    optimizer: Any = None
    lr_scheduler: Any = None
    state: RunState = field(default_factory=RunState)
    # Options changed by resumes so far, each {"step", "option", "old", "new"} (summary, card, every checkpoint)
    changed_options: list[dict] = field(default_factory=list)
    options_record: dict | None = None  # what every checkpoint records about the options (resume_options)
    # Within an update (micro-batches of one optimizer step):
    kernel_veto: bool = False  # a kernel failed its check during this update: skip it
    update_starts: bool = True  # the next micro-batch is the first of an update
    # Set by setup's stages, never None once setup has returned: the later stages use them without a check. Not
    # arguments and no default (read before its stage, one raises AttributeError), left out of repr and comparison.
    model: torch.nn.Module = field(init=False, repr=False, compare=False)  # as accelerate wraps it (_build_optimizer)
    # --compile: what dynamo compiled, per batch shape (_install_kernels)
    compiled: CompileCounters = field(init=False, repr=False, compare=False)
    order: batch_lib.EpochBatches = field(init=False, repr=False, compare=False)  # (_build_optimizer)
    guard: StepGuard = field(init=False, repr=False, compare=False)  # (_build_optimizer)
    recovery: Recovery = field(init=False, repr=False, compare=False)  # (_restore)
    generator: torch.Generator = field(init=False, repr=False, compare=False)  # (_restore)
    micro_losses: torch.Tensor = field(init=False, repr=False, compare=False)  # the update's loss so far (_restore)
    ema: ema_lib.TrainableEMA | None = field(default=None, repr=False, compare=False)  # --use_ema (_restore)

    def load_batch(self, batch: dict, step: int) -> dict:
        """A collated batch as the step consumes it: on the device, cached or encoded, with any drill applied.

        The loop and the recovery's replay of a faulty step both go through here, so a replay sees what the
        step saw.
        """
        batch = self.spec.loss.prepare_batch(self.comps, batch, self.accelerator.device, self.data.cached)
        # The 1-based update number, a host int: a family may choose per step on the host (Wan A14B trains its
        # experts on alternate steps) without reading anything back from the device; a resumed run and a replay
        # see the same number.
        batch["step"] = step
        injector = self.hooks.injector
        return injector.batch(step, batch) if injector is not None else batch


def check_output_dir(cfg: TrainConfig) -> str | None:
    """Refuse to overwrite a finished run, or to mix a fresh run with an older run's checkpoints, unless asked to
    (or resuming); return a line to log when ``--overwrite_output_dir`` removed old checkpoints.

    Called on the main process after the output lock: nothing else writes the folder meanwhile.
    """
    out = Path(cfg.training.output_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir `{out}` is a file, not a folder. Choose a folder path.")
    done = [name for name in (*ADAPTER_FILES, ADAPTER_INDEX_FILE) if (out / name).exists()]
    if done and not cfg.training.overwrite_output_dir and not cfg.checkpoints.resume_from_checkpoint:
        raise UserError(
            f"--output_dir `{out}` already holds a finished run ({done[0]}). Choose a new --output_dir, "
            "add --overwrite_output_dir to replace it, or --resume_from_checkpoint latest to continue it."
        )
    if cfg.checkpoints.resume_from_checkpoint:
        return None
    # A fresh run among older checkpoints would prune its own new ones (pruning keeps the highest steps) and a
    # later `latest` would resume the older run: they never mix.
    old = old_checkpoints(out)
    if not old:
        return None
    names = ", ".join(p.name for p in old[:5]) + (f" and {len(old) - 5} more" if len(old) > 5 else "")
    if not cfg.training.overwrite_output_dir:
        raise UserError(
            f"--output_dir `{out}` holds checkpoints of an earlier run ({names}), and this run does not resume: "
            "its own checkpoints would mix with them. Continue that run with --resume_from_checkpoint latest, choose "
            "another --output_dir, or add --overwrite_output_dir to remove them and start over."
        )
    for path in old:
        shutil.rmtree(path)
    return f"--overwrite_output_dir: removed {len(old)} checkpoint folder(s) of an earlier run from {out} ({names})"


def check_run_folders(cfg: TrainConfig) -> None:
    """Refuse, in one paragraph, an --output_dir, --logging_dir or latent cache folder (--cache_dir, else the
    default one) that is or lies inside a data folder (:func:`~dit_lora.training.run_folders.check_folders_apart`)
    or cannot be written (a read-only file system, no permission)."""
    check_folders_apart(cfg)  # first: the write probes below would already write into the data
    out = Path(cfg.training.output_dir)
    check_writable(out, "--output_dir")
    if cfg.validation.logging_dir and cfg.validation.report_to != "none":
        check_writable(
            out / cfg.validation.logging_dir, "--logging_dir", " (A relative --logging_dir is inside --output_dir.)"
        )
    if cfg.data.cache_latents:
        if cfg.data.cache_dir:
            check_writable(cfg.data.cache_dir, "--cache_dir")
        else:
            check_writable(
                default_cache_root(),
                "--cache_dir",
                " (It is the default cache folder: $HF_HOME/dit-lora/"
                "cache or ~/.cache/dit-lora/cache; pass --cache_dir to put the cache elsewhere.)",
            )


def old_checkpoints(out: Path) -> list[Path]:
    """Every checkpoint folder in ``out``, whole, incomplete or half-replaced (``checkpoint-*``,
    ``.tmp-checkpoint-*``, ``.old-checkpoint-*``), sorted by name."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if p.is_dir() and _CHECKPOINT_DIR.match(p.name))


_CHECKPOINT_DIR = re.compile(r"^(\.tmp-|\.old-)?checkpoint-\d+$")


def check_engine() -> EngineChoice:
    """The launch's engine (:func:`dit_lora.core.engine.decide_engine`: DDP, or FSDP2 from
    accelerate_configs/fsdp2.yaml), judged before anything loads; DeepSpeed and FSDP version 1 are refused in one
    paragraph naming what to use instead (DeepSpeed steps inside its backward: no step could be skipped)."""
    return decide_engine()


def setup(cfg: TrainConfig | Resolved) -> Run:
    """Build a :class:`Run` ready for its first (or resumed) step; see the module docstring for the stages.

    ``cfg``: what :func:`dit_lora.setup.resolve.resolve` returned (the entry points), or a config built in code,
    resolved here first (before the Accelerator exists).
    """
    run = _start(cfg if isinstance(cfg, Resolved) else resolve_for_training(cfg))
    cfg = run.cfg
    _load(run)
    _add_trainables(run)
    _install_kernels(run)
    _build_optimizer(run)
    _restore(run)
    if cfg.performance.cpu_reuse_memory and run.accelerator.device.type == "cpu":
        # Loading and caching ran with glibc's defaults (each once); what they freed goes back, then the steps
        # keep their own working set.
        release_freed_memory()
        note = reuse_freed_memory()
        if note:
            run.log(note)
    return run


def _memory_plan(cfg: TrainConfig, spec: FamilySpec, accelerator, defaults, log):
    """Predict the run's peak memory before anything loads; stop when it clearly exceeds the device's.

    A family the planner does not cover, or a plan that cannot be made, is a note, never a stop.
    """
    device = accelerator.device
    engine = decide_engine().name  # FSDP2: the plan is one rank's (sharded weights and state, blocks parked at load)
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
            engine=engine,
        )
    except QuantizeError:  # a refusal, not a planning problem
        raise
    except (NotImplementedError, UserError) as err:
        log(f"memory plan: none ({err})")
        return None
    log(
        f"memory plan: predicted peak {plan.peak_memory_bytes / 2**30:.2f} GiB per process"
        + (f" (FSDP2, sharded over {accelerator.num_processes})" if engine == "fsdp2" else "")
        + " of "
        f"{capacity / 2**30:.2f} GiB on {device.type}, {plan.flops_per_update() / 1e12:.3g} TFLOP per update "
        "(`dit-lora plan` for the details)"
    )
    narrow = plan_report.check_fits(plan, capacity, plan_report.device_name(device))
    if narrow:  # it fits only inside the plan's error: the run starts, told the risk and the flags that keep it free
        log(narrow)
    return plan


def resolve_for_training(cfg: TrainConfig) -> Resolved:
    """A parsed (or code-built) config resolved for training (:func:`dit_lora.setup.resolve.resolve`): the engine and
    the folders are judged first (nothing is built for a launch or a folder that cannot work), then the demo, the
    defaults and the family's checks. The entry points call it before the Accelerator exists."""
    check_engine()
    check_run_folders(cfg)  # a read-only folder is one paragraph, before the demo is built
    return resolve(cfg)


def _start(resolved: Resolved) -> Run:
    """Set a run up before any model loads, in named stages: the option checks, the process group, the output
    folder (lock, resume, push), then the checks and notes that need the resolved options."""
    from accelerate.utils import set_seed

    cfg, spec, defaults = resolved.config, resolved.spec, resolved.defaults
    engine = check_engine()
    if engine.name == "fsdp2":
        fsdp2.check_options(cfg)  # before the lock, the accelerator and the model
    ema_lib.check_options(cfg)
    out = Path(cfg.training.output_dir)
    check_run_folders(cfg)  # before the lock, the accelerator and the model: a read-only folder is one paragraph
    accelerator = _accelerator(cfg, engine.name, out)
    log = _main_process_log(accelerator)
    # `dit-lora launch --mixed_precision X`: never silently ignored
    check_launch_precision(cfg.training.mixed_precision, log)
    if engine.name == "fsdp2":
        log(f"engine: FSDP2 ({'; '.join(engine.reasons)})")
    resume = _claim_output_dir(cfg, out, accelerator, engine.name == "fsdp2", log)
    for line in defaults.lines() if defaults is not None else ():
        log(line)
    check_options(resume, cfg, log)  # the resolved options against the checkpoint's, before anything loads
    check_compiler(cfg.performance.compile, accelerator.device.type)
    # before anything loads (the plan also checks backbone training)
    quantize.check_config(cfg, accelerator.device.type, spec)
    plan = None if cfg.guards.ignore_memory_plan else _memory_plan(cfg, spec, accelerator, defaults, log)
    # fail before loading
    hooks = Hooks.from_config(cfg.guards.inject_faults, accelerator.process_index, accelerator.device)
    _log_start_notes(cfg, spec, log)
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
        started=time.perf_counter(),
        resume=resume,
        hooks=hooks,
        defaults=defaults,
        plan=plan,
        engine=engine.name,
    )


def _accelerator(cfg, engine: str, out: Path):
    """The run's ``Accelerator``, built once from the resolved config; refused when the launched processes did not
    form one group (they would overwrite each other's output)."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration

    # Built once, from the resolved config (the catalogue's --gradient_accumulation_steps included). Under FSDP2
    # accelerate builds a plain multi-process state: dit-lora shards the model itself (training/fsdp2.py).
    with (
        fsdp2.accelerate_sees_no_fsdp() if engine == "fsdp2" else contextlib.nullcontext(),
        plain_cpu_device(),
    ):
        accelerator = Accelerator(
            gradient_accumulation_steps=cfg.training.gradient_accumulation_steps,
            mixed_precision=cfg.training.mixed_precision,
            log_with=None if cfg.validation.report_to == "none" else cfg.validation.report_to,
            project_config=ProjectConfiguration(
                project_dir=str(out), logging_dir=str(out / cfg.validation.logging_dir)
            ),
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
            "accelerate config (see accelerate_configs/), e.g. `dit-lora launch --multi_gpu --num_processes N`."
        )
    return accelerator


def _main_process_log(accelerator) -> Callable[[str], None]:
    """The run's ``log``: a line from the main process only, above the step bar while one is drawn."""

    def log(msg: str) -> None:
        if accelerator.is_main_process:
            say(msg)  # above the step bar while one is drawn

    return log


def _claim_output_dir(cfg, out: Path, accelerator, sharded: bool, log) -> Path | None:
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
        # a bad path fails before any model loads
        return resolve_resume(out, cfg.checkpoints.resume_from_checkpoint, log)

    resume = main_process_check(accelerator, judge_folder, what=f"checking --output_dir `{out}`", share_result=True)
    if resume is not None:  # another process count or engine: refused now, not after the model has loaded
        check_resumable(resume, accelerator.num_processes, sharded=sharded)
    if cfg.hub.push_to_hub:  # a push that cannot happen stops the run before training, not after it
        push_note = main_process_check(accelerator, lambda: preflight_push(cfg.hub, out), what="checking --push_to_hub")
        if push_note:
            log(push_note)
    return resume


def _log_start_notes(cfg, spec, log) -> None:
    """The family's start notes and precision warnings, and the quantized base and text encoder, one line each."""
    for note in fallback.start_notes(spec, cfg):
        log(note)
    for note in fallback.precision_notes(spec, cfg):
        log(f"warning: {note}")
    if quantize.enabled(cfg.model):
        log(f"quantized base (--quantize_base {cfg.model.quantize_base}): {quantize.describe(cfg.model)}")
    if cfg.model.quantize_text_encoder:
        log(f"quantized text encoder (--quantize_text_encoder): {quantize.describe_text_encoder(cfg.model)}")


def _load(run: Run) -> None:
    cfg, spec, device = run.cfg, run.spec, run.accelerator.device
    run.comps = spec.model.load_components(cfg, device)
    check_fp16_model(run.comps.model, cfg.training.allow_fp16)
    fallback.configure(spec, run.comps, cfg)
    trainables.check_adapter_rank(run.comps.model, spec, cfg)  # before the data and its cache, not after them
    if cfg.validation.validation_prompt:  # prepared while the encoders are loaded: building the data may release them
        samples = fallback.require(spec, "samples", "--validation_prompt")
        run.validation_cond = samples.validation_inputs(run.comps, cfg.validation)
    run.data = spec.data.build_data(cfg, spec, run.comps, run.accelerator)
    if run.data is None:  # the family keeps the standard data path
        run.data = prepare_data(cfg, spec, run.comps, run.accelerator)
    if run.engine != "fsdp2":  # the blocks that waited in host memory for the cache (FSDP2: sharded from there)
        moved = cache_parking.bring_waiting(
            run.comps.model, spec.info.block_lists, cfg.performance.blocks_to_swap, device
        )
        if moved[0]:
            run.log(cache_parking.describe(*moved, device))


def _add_trainables(run: Run) -> None:
    cfg, spec = run.cfg, run.spec
    made = trainables.attach_trainables(run.comps.model, spec, cfg)
    run.lora_config, run.backbone_names, run.extra_groups = made.lora_config, made.backbone_names, made.extra_groups
    run.saved_backbone = made.saved_backbone
    for note in made.notes:
        run.log(note)
    mismatches = audit_precision(
        run.comps, fallback.expected_dtypes(spec, run.comps, cfg), allow_fp16=cfg.training.allow_fp16
    )
    if mismatches:
        run.log("warning: " + format_audit(mismatches) + f"\n  (full list: {run.out / PRECISION_AUDIT_FILE})")
        if run.accelerator.is_main_process:
            write_json_atomic(run.out / PRECISION_AUDIT_FILE, mismatches)


def _install_kernels(run: Run) -> None:
    cfg, model, device = run.cfg, run.comps.model, run.accelerator.device
    fused = run.spec.kernels  # the family's own blocks/processors; generic points apply to all
    points = fused.kernel_patch_points() if fused else ()
    patched = patch_model(model, points, **_kernel_switches(cfg.performance), device=device)
    run.kernels = kernel_runtime(model)
    run.log(_describe_kernels(patched, run.kernels))
    injector = run.hooks.injector
    if injector is not None:
        run.log(f"fault drill active: --inject_faults {cfg.guards.inject_faults}")
        if injector.broken_attention:
            install_broken_attention()
        if injector.broken_kernel and not install_sample_mixing_modulate(run.kernels):
            run.log(
                "warning: --inject_faults broken_kernel has nothing to break: the modulate kernel is not patched "
                "(use --kernels on)"
            )
    if cfg.guards.attention_canary:
        # FSDP2: the blocks wait in host memory until sharding (block_swap.park_blocks); each tested attention
        # module alone comes to the device (a sharded model's submodules could not run outside their block's forward)
        sharding = run.engine == "fsdp2"
        place = functools.partial(fsdp2.brought_in, device=device) if sharding else canary_in_place
        attention_canary(model, device, cfg.weight_dtype, run.log, place=place)
        model.zero_grad(set_to_none=True)
    run.compiled = compile_model(
        model,
        run.spec,
        cfg.performance.compile,
        dynamic=run.spec.info.compile_dynamic,
        buckets=len(set(run.data.groups or [0])),
    )
    if cfg.performance.compile != "off":
        run.log(
            f"compile: --compile {cfg.performance.compile}, {run.compiled.regions} compiled region(s), "
            f"{'dynamic shapes' if run.spec.info.compile_dynamic else 'one static graph per batch shape'}; "
            "kernel checks, replays and samples run eagerly; inside compiled blocks inductor fuses the PyTorch "
            "references of the fused ops (attention keeps its backend)"
        )


def _build_optimizer(run: Run) -> None:
    cfg, accelerator, model = run.cfg, run.accelerator, run.comps.model
    world = accelerator.num_processes
    if run.engine == "fsdp2":  # before the groups: the optimizer must hold the sharded (DTensor) parameters
        info = run.spec.info
        run.sharded = fsdp2.shard(
            model,
            info.block_lists,
            accelerator.device,
            train_backbone=bool(run.backbone_names),
            shared=info.fsdp_shared_modules,
        )
        run.log(fsdp2.describe(run.sharded.counts, world, run.sharded.sync_each_micro_batch))
    run.order = batch_lib.EpochBatches(
        len(run.data),
        cfg.training.train_batch_size,
        seed=cfg.training.seed,
        rank=accelerator.process_index,
        world_size=world,
        random_flip=cfg.data.random_flip,
        groups=run.data.groups,
        caption_dropout=cfg.data.caption_dropout_probability,
    )
    batch = run.order.trained_batch(cfg.training.train_batch_size, run.log)
    # the batch that trains
    lr_scale = cfg.training.gradient_accumulation_steps * batch * world if cfg.training.scale_lr else 1
    groups = trainables.build_param_groups(
        model,
        learning_rate=cfg.training.learning_rate * lr_scale,
        backbone_names=run.backbone_names,
        backbone_learning_rate=cfg.lora.backbone_learning_rate * lr_scale,
        weight_decay=cfg.training.adam_weight_decay,
        loraplus_lr_ratio=cfg.lora.loraplus_lr_ratio,
        extra_groups=[(label, names, lr * lr_scale) for label, names, lr in run.extra_groups],
    )
    run.group_info = trainables.describe_groups(groups)
    run.log("trainable parameter groups:\n" + trainables.format_groups(run.group_info))
    check_accumulation(cfg.training, len(run.order), len(run.data), world)
    updates_per_epoch = math.ceil(len(run.order) / cfg.training.gradient_accumulation_steps)
    run.max_steps = cfg.training.max_train_steps or cfg.training.num_train_epochs * updates_per_epoch
    optimizer, fused = make_optimizer(cfg.training, groups, accelerator.device)
    run.lr_scheduler = make_lr_scheduler(cfg.training, optimizer, run.max_steps)
    run.interval = max(1, min(10, cfg.validation.validation_steps, cfg.guards.max_consecutive_skips))
    run.guard = StepGuard.for_run(
        cfg.guards,
        optimizer,
        run.lr_scheduler.lr_lambdas,
        run.max_steps,
        accelerator.device,
        fused=fused,
        interval=run.interval,
        world_size=world,
    )
    if run.sharded is None:
        quantize.keep_out_of_ddp(model)  # --quantize_base fp8_scaled: its weight buffers are never broadcast by DDP
        # --blocks_to_swap: hooked now that LoRA is attached, before prepare's .to(device), which leaves them parked
        swap = block_swap.install(
            model, run.spec.info.block_lists, cfg.performance.blocks_to_swap, accelerator.device, run.spec.name
        )
        if swap is not None:
            run.log(swap.describe())
    # --activation_offloading: saved-tensor hooks around the forward of the blocks' owners (chained under the swap's;
    # under FSDP2 installed on the sharded model: a block's gathered weights are parameters, never offloaded)
    offload = activation_offload.install(
        model, run.spec.info.block_lists, cfg.performance.activation_offloading, accelerator.device
    )
    if offload is not None:
        run.log(offload.describe())
    if run.sharded is not None:  # never passed to prepare (DDP would wrap it); its checkpoint is sharded_checkpoint's
        run.model, run.optimizer = model, fsdp2.wrap_optimizer(optimizer)
        return
    run.model, run.optimizer = accelerator.prepare(model, optimizer)
    _register_state_hooks(accelerator, run.guard)


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
    cfg, accelerator = run.cfg, run.accelerator
    run.generator = torch.Generator(device=accelerator.device).manual_seed(
        cfg.training.seed * 1000 + accelerator.process_index
    )
    if cfg.checkpoints.resume_from_checkpoint and run.resume is None:
        run.log("no complete checkpoint found; starting from scratch")
    if run.resume is not None:
        run.changed_options = resume_history(run.resume, cfg, run.data.samples, run.log)
        saved = load_checkpoint(accelerator, run.resume, run.generator, read_state=sharded_state_io(run)[1])
        run.guard.load_state_dict(saved["guard"])  # after load_state: it re-installs device LR tensors
        run.kernels.load_state_dict(saved["kernels"])
        run.state = RunState(**saved["run"])
        run.log(f"resumed from {run.resume} at step {run.state.global_step}")
    run.options_record = options_record(cfg, run.data.samples, run.changed_options)
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
        order=run.order,
        injector=run.hooks.injector,
        load_batch=run.load_batch,
        log=run.log,
        replay=run.sharded is None,
    )
    run.ema = ema_lib.start(run)  # before the first snapshot, which it follows
    run.recovery.start(accelerator.unwrap_model(run.model), run.state.global_step)
    run.micro_losses = torch.zeros((), device=accelerator.device)
    run.log(
        f"training: {len(run.data)} samples, {accelerator.num_processes} process(es), batch "
        f"{run.order.largest_batch} x accumulation {cfg.training.gradient_accumulation_steps}, {run.max_steps} updates"
    )


def sharded_state_io(run: Run) -> tuple[Callable[[Path], None] | None, Callable[[Path], None] | None]:
    """(write, read) of a checkpoint's weights and optimizer state for FSDP2 (every rank its shards, through
    :mod:`.sharded_checkpoint`); (None, None) under DDP: accelerate's ``save_state``/``load_state``."""
    if run.sharded is None:
        return None, None
    model, optimizer, guard = run.model, run.optimizer.optimizer, run.guard
    return (
        lambda folder: sharded_checkpoint.save_sharded(folder, model, optimizer, guard),
        lambda folder: sharded_checkpoint.load_sharded(folder, model, optimizer, guard),
    )


def _register_state_hooks(accelerator, guard: StepGuard) -> None:
    """Checkpoint only trainable weights (safetensors), not the frozen multi-GB base model, plus the guard's snapshot."""
    from safetensors.torch import load_file, save_file

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
        check_same_trainables(state, params, input_dir)
        with torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value)
        if (Path(input_dir) / GUARD_SNAPSHOT_FILE).is_file():
            guard.load_snapshot_tensors(model, load_file(str(Path(input_dir) / GUARD_SNAPSHOT_FILE)))

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)


def _kernel_switches(kernels: KernelOptions) -> dict[str, Any]:
    """patch_model's switches from the kernels section of the config."""
    return {
        "kernels": kernels.kernels,
        "modulate": not kernels.disable_modulate_kernel,
        "layernorm": not kernels.disable_layernorm_kernel,
        "linear_attention": not kernels.disable_linear_attention_kernel,
        "attention_backend": kernels.attention_backend,
        "flashattn": not kernels.disable_flashattn,
        "check_interval": kernels.kernel_check_interval,
    }


def _describe_kernels(counts: dict[str, int], runtime) -> str:
    patched = ", ".join(f"{name} x{n}" for name, n in counts.items() if n) or "nothing"
    backend = runtime.attention_backend.name if runtime.attention_backend is not None else "diffusers' own"
    # patch_model has already logged its notes once (they are in train_summary.json too)
    return f"kernels: patched {patched}; attention backend: {backend}"


__all__ = ["Run", "RunState", "check_engine", "check_output_dir", "resolve_for_training", "setup"]
