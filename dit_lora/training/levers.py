"""The run's levers as :class:`~.features.Feature` s, and :func:`for_run`, the list a run holds (``Run.features``).

Each class here is the whole of what its lever does to a run: where setup installs it and what it does around a
step. The mechanisms stay in their own modules (:mod:`dit_lora.modeling.block_swap`,
:mod:`dit_lora.modeling.activation_offload`, :mod:`.compile`, :mod:`.ema`, :mod:`dit_lora.kernels`, :mod:`.canary`,
:mod:`.drills`); these classes only connect them to the stages.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, ClassVar

import torch

from dit_lora.config.schema import PerformanceOptions
from dit_lora.data.batches import PRIOR
from dit_lora.kernels import kernel_runtime, patch_model
from dit_lora.kernels.monitor import install_sample_mixing_modulate
from dit_lora.modeling import activation_offload, block_swap
from dit_lora.training import ema as ema_lib
from dit_lora.training.canary import attention_canary, install_broken_attention
from dit_lora.training.compile import CompileCounters, compile_model, eager, shape_key
from dit_lora.training.drills import Hooks
from dit_lora.training.features import Feature, Features, StepContext, class_images_loss
from dit_lora.training.sync_audit import deliberate


class Drills(Feature):
    """``--inject_faults``, the crash and signal points and the sync audit (:class:`~.drills.Hooks`, parsed once at
    setup): the audit refuses host syncs inside the step, the injector breaks what its spec names."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks

    def around_step(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        return self.hooks.sync_audit.step()

    def around_transfer(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        # the loader's batch onto the device: the step's only host-to-device copy
        return self.hooks.sync_audit.batch_transfer(ctx.batch)

    def around_forward(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        injector = self.hooks.injector
        return injector.active(ctx.step, run.model) if injector is not None else contextlib.nullcontext()

    def after_loss(self, run, ctx: StepContext, loss: torch.Tensor) -> torch.Tensor:
        injector = self.hooks.injector
        return injector.loss(ctx.step, loss) if injector is not None else loss

    def after_step(self, run, ctx: StepContext) -> None:
        state = run.state
        self.hooks.crash_point("micro_batch", state.batch_in_epoch + state.epoch * len(run.schedule.order))


class KernelChecks(Feature):
    """The fused kernels and attention backend (patched at setup), the drills that break them, the attention canary,
    and the sampled check of an update's first micro-batch, which switches off a failing kernel and vetoes the
    update. Its state (what failed so far) is in every checkpoint under ``kernels``."""

    stage: ClassVar[str] = "kernels"
    key: ClassVar[str | None] = "kernels"

    def __init__(self) -> None:
        self.runtime: Any = None

    def install(self, run) -> None:
        cfg, model, device = run.cfg, run.comps.model, run.accelerator.device
        fused = run.spec.kernels  # the family's own blocks/processors; generic points apply to all
        points = fused.kernel_patch_points() if fused else ()
        patched = patch_model(model, points, **kernel_switches(cfg.performance), device=device)
        self.runtime = kernel_runtime(model)
        run.log(describe_kernels(patched, self.runtime))
        injector = run.hooks.injector
        if injector is not None:
            run.log(f"fault drill active: --inject_faults {cfg.guards.inject_faults}")
            if injector.broken_attention:
                install_broken_attention()
            if injector.broken_kernel and not install_sample_mixing_modulate(self.runtime):
                run.log(
                    "warning: --inject_faults broken_kernel has nothing to break: the modulate kernel is not patched "
                    "(use --kernels on)"
                )
        if cfg.guards.attention_canary:
            attention_canary(model, device, cfg.weight_dtype, run.log, place=run.engine.canary_place(device))
            model.zero_grad(set_to_none=True)

    def before_step(self, run, ctx: StepContext) -> None:
        ctx.checking = ctx.first and self.runtime.due(ctx.step)  # an update's first micro-batch only
        if ctx.checking:
            self.runtime.arm(ctx.step)

    def after_backward(self, run, ctx: StepContext) -> None:
        if ctx.checking:  # sampled steps only: this compares on the host
            with deliberate():
                run.update.veto = self.runtime.finish_check(ctx.step) or run.update.veto

    def state_dict(self) -> dict[str, Any]:
        return self.runtime.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.runtime.load_state_dict(state)


class Compile(Feature):
    """``--compile``: installed after everything that changes the modules; a kernel-check step, replays, evaluations
    and samples run eagerly; dynamo's counters read around every step (:class:`~.compile.CompileCounters`)."""

    stage: ClassVar[str] = "kernels"

    def __init__(self) -> None:
        self.counters: CompileCounters | None = None

    def install(self, run) -> None:
        cfg, spec = run.cfg, run.spec
        self.counters = compile_model(
            run.comps.model,
            spec,
            cfg.performance.compile,
            dynamic=spec.info.compile_dynamic,
            buckets=len(set(run.data.groups or [0])),
        )
        if cfg.performance.compile != "off":
            run.log(
                f"compile: --compile {cfg.performance.compile}, {self.counters.regions} compiled region(s), "
                f"{'dynamic shapes' if spec.info.compile_dynamic else 'one static graph per batch shape'}; "
                "kernel checks, replays and samples run eagerly; inside compiled blocks inductor fuses the PyTorch "
                "references of the fused ops (attention keeps its backend)"
            )

    def before_step(self, run, ctx: StepContext) -> None:
        if self.counters is not None:
            self.counters.before_step()

    def around_step(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        # A kernel-check step runs eagerly: the check captures the fused ops' inputs with host code.
        return eager(self.counters) if ctx.checking else contextlib.nullcontext()

    def around_forward(self, run, ctx: StepContext) -> contextlib.AbstractContextManager:
        if self.counters is not None and self.counters.mode != "off":
            ctx.shape = shape_key(ctx.batch)
        return contextlib.nullcontext()

    def after_step(self, run, ctx: StepContext) -> None:
        if self.counters is not None:
            self.counters.after_step(ctx.step, ctx.shape, ran_compiled=not ctx.checking)

    def outside_step(self) -> contextlib.AbstractContextManager:
        return eager(self.counters)

    def summary(self) -> dict[str, Any] | None:
        """train_summary.json's ``compile`` (None with --compile off)."""
        return self.counters.summary() if self.counters is not None and self.counters.mode != "off" else None


class BlockSwap(Feature):
    """``--blocks_to_swap``: hooked once LoRA is attached, before ``prepare``'s ``.to(device)``, which leaves the
    swapped blocks parked (:mod:`dit_lora.modeling.block_swap`)."""

    def install(self, run) -> None:
        spec, device = run.spec, run.accelerator.device
        swap = block_swap.install(
            run.comps.model, spec.info.block_lists, run.cfg.performance.blocks_to_swap, device, spec.name
        )
        if swap is not None:
            run.log(swap.describe())


class ActivationOffload(Feature):
    """``--activation_offloading``: saved-tensor hooks around the forward of the blocks' owners, chained under the
    swap's; under FSDP2 on the sharded model (a block's gathered weights are parameters, never offloaded)."""

    def install(self, run) -> None:
        model, device = run.comps.model, run.accelerator.device
        offload = activation_offload.install(
            model, run.spec.info.block_lists, run.cfg.performance.activation_offloading, device
        )
        if offload is not None:
            run.log(offload.describe())


class EMA(Feature):
    """``--use_ema`` (:mod:`.ema`): started at the restore stage as a follower of the guard (before its first
    snapshot), updated after every update weighted by the guard's device flag, written into every checkpoint."""

    stage: ClassVar[str] = "restore"

    def __init__(self) -> None:
        self.ema: ema_lib.TrainableEMA | None = None

    def install(self, run) -> None:
        self.ema = ema_lib.start(run)

    def after_update(self, run, ctx: StepContext) -> None:
        if self.ema is not None:  # weighted by the guard's device flag: a skipped step leaves it as it was
            self.ema.update(run.guard.last_flag)

    def writes_files(self) -> bool:
        return self.ema is not None

    def write_files(self, folder: Path) -> None:
        if self.ema is not None:
            self.ema.write(folder)


class DataSets(Feature):
    """A dataset config's sets (:class:`~dit_lora.data.data_sets.SetMix`): a batch holds one set's samples, so its
    loss enters the backward times that set's ``loss_weight`` (``StepContext.loss_factor``: the logged loss and the
    guard's spike statistics stay unweighted), read on the host from the loader's sample indices before the batch
    moves (no device read); sets all weighing 1 (or one data set) multiply nothing. With class images (prior
    preservation) each micro-batch carries a batch of them (``PRIOR``): their loss, the family's own loss on them
    with the step's generator, is added times --prior_loss_weight (``StepContext.added_loss``, after the set's loss
    weight) before the one backward, as diffusers' DreamBooth scripts add it. It counts the micro-batches each set gave (every checkpoint keeps the counts, so a resumed run's
    equal an uninterrupted one's; the summary's ``data_sets`` lists them)."""

    key: ClassVar[str | None] = "data_sets"
    state_optional: ClassVar[bool] = True  # a checkpoint written before dataset configs has none

    def __init__(self) -> None:
        self.batches: list[int] = []

    def before_step(self, run, ctx: StepContext) -> None:
        sets = run.data.sets
        if sets is None:
            return
        k = sets.of_sample[int(ctx.batch["sample_index"][0])]
        self.batches += [0] * (len(sets.names) - len(self.batches))
        self.batches[k] += 1
        prior = ctx.batch.get(PRIOR)
        if prior is not None:
            self.batches[sets.of_sample[int(prior["sample_index"][0])]] += 1
        ctx.loss_factor = sets.loss_weights[k]

    def after_loss(self, run, ctx: StepContext, loss: torch.Tensor) -> torch.Tensor:
        prior = ctx.batch.get(PRIOR)
        if prior is not None:  # added after the instance set's loss weight: --prior_loss_weight is its whole weight
            with run.accelerator.autocast():  # the instance loss was computed under it, in the step
                ctx.added_loss = class_images_loss(
                    run.spec,
                    run.comps,
                    run.cfg,
                    run.data.sets.prior_loss_weight,
                    run.model,
                    prior,
                    run.update.generator,
                )
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"batches": list(self.batches)} if self.batches else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = list(state.get("batches", []))


def for_run(hooks: Hooks) -> Features:
    """Every lever of a run, in the order setup installs them and the step calls them."""
    return Features([Drills(hooks), DataSets(), KernelChecks(), Compile(), BlockSwap(), ActivationOffload(), EMA()])


def kernel_switches(kernels: PerformanceOptions) -> dict[str, Any]:
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


def describe_kernels(counts: dict[str, int], runtime) -> str:
    """The start-of-run line: what was patched, and the attention backend."""
    patched = ", ".join(f"{name} x{n}" for name, n in counts.items() if n) or "nothing"
    backend = runtime.attention_backend.name if runtime.attention_backend is not None else "diffusers' own"
    # patch_model has already logged its notes once (they are in train_summary.json too)
    return f"kernels: patched {patched}; attention backend: {backend}"


def ema_of(features: Features) -> ema_lib.TrainableEMA | None:
    """The run's EMA (``--use_ema``), or None."""
    feature = features.find(EMA)
    return feature.ema if feature is not None else None


def data_sets_summary(run) -> list[dict[str, Any]] | None:
    """train_summary.json's ``data_sets`` (None: one data set)."""
    feature = run.features.find(DataSets)
    if run.data.sets is None or feature is None:
        return None
    return run.data.sets.summary(feature.batches)


def compile_summary(features: Features) -> dict[str, Any] | None:
    """train_summary.json's ``compile``."""
    feature = features.find(Compile)
    return feature.summary() if feature is not None else None


__all__ = [
    "EMA",
    "ActivationOffload",
    "BlockSwap",
    "Compile",
    "DataSets",
    "Drills",
    "KernelChecks",
    "compile_summary",
    "data_sets_summary",
    "describe_kernels",
    "ema_of",
    "for_run",
    "kernel_switches",
]
