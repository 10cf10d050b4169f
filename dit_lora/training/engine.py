"""The engine a run trains with, as one object: DDP (one process is its trivial case) or FSDP2.

:func:`dit_lora.core.engine.decide_engine` reads the launch; :func:`make_engine` turns its choice into the object
every stage asks instead of asking which engine it is: the setup (the Accelerator built under the engine's view of
the launch, the blocks brought to the device after the cache, where the attention canary runs its module, the
sharding before the optimizer's groups, ``prepare``), the step (gradient sync of a micro-batch, clipping), the
checkpoints (the weights' and optimizer's state written and read), the evaluations (every rank samples, the gathered
weights freed afterwards) and the export (the trainable weights gathered, the model moved off the device for the
final samples). A third engine is a third class here; the loop, the checkpoints and the export do not change.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.schema import TrainingOptions, ValidationOptions
from dit_lora.core.engine import EngineChoice, plain_cpu_device
from dit_lora.core.errors import UserError
from dit_lora.modeling import cache_parking, quantize
from dit_lora.output.adapter import assert_finite
from dit_lora.training import fsdp2, sharded_checkpoint
from dit_lora.training.canary import canary_in_place
from dit_lora.training.checkpoint import GUARD_SNAPSHOT_FILE, TRAINABLE_FILE, check_same_trainables
from dit_lora.training.guard import StepGuard


class DDPEngine:
    """Data parallel through accelerate: the model wrapped by ``prepare``, its gradients all-reduced by DDP at an
    update's last micro-batch, its trainable weights and optimizer state checkpointed by ``save_state``. With one
    process nothing is wrapped and every collective is a no-op."""

    name: ClassVar[str] = "ddp"
    #: its checkpoints hold every process's state in accelerate's files (no ``sharded_state/``)
    sharded: ClassVar[bool] = False
    #: a faulty step can be replayed on the whole model (the recovery's diagnosis)
    replays: ClassVar[bool] = True
    #: validation samples come from the main process alone
    samples_on_every_rank: ClassVar[bool] = False

    def __init__(self, choice: EngineChoice) -> None:
        self.choice = choice
        self.accelerator: Any = None  # built by build_accelerator
        self.model: Any = None  # set by prepare: what the checkpoints read and write
        self.optimizer: Any = None
        self.guard: StepGuard | None = None

    # ---- setup ---------------------------------------------------------------------------
    def check_options(self, cfg: TrainConfig) -> None:
        """Refuse, before anything loads, the options this engine does not combine with (none under DDP)."""

    def start_note(self) -> str | None:
        """The start-of-run line naming the engine (None: the default needs none)."""
        return None

    def plan_note(self, processes: int) -> str:
        """What the memory plan's start-of-run line adds about the engine (its prediction is per process)."""
        return ""

    def _launch_view(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def build_accelerator(self, training: TrainingOptions, validation: ValidationOptions, out: Path):
        """The run's ``Accelerator``, built once from the resolved config; refused when the launched processes did
        not form one group (they would overwrite each other's output)."""
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration

        # Under FSDP2 accelerate builds a plain multi-process state: dit-lora shards the model itself (fsdp2.py).
        with self._launch_view(), plain_cpu_device():
            accelerator = Accelerator(
                gradient_accumulation_steps=training.gradient_accumulation_steps,
                mixed_precision=training.mixed_precision,
                log_with=None if validation.report_to == "none" else validation.report_to,
                project_config=ProjectConfiguration(
                    project_dir=str(out), logging_dir=str(out / validation.logging_dir)
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
        self.accelerator = accelerator
        return accelerator

    def bring_waiting(self, model, paths, blocks_to_swap: int, device, log: Callable[[str], None]) -> None:
        """After the data (and its cache): the blocks that waited in host memory come to the device."""
        moved = cache_parking.bring_waiting(model, paths, blocks_to_swap, device)
        if moved[0]:
            log(cache_parking.describe(*moved, device))

    def canary_place(self, device: torch.device) -> Callable:
        """Where the attention canary runs a module: in place (the model is on the device by now)."""
        return canary_in_place

    def shard(self, model, info, *, train_backbone: bool, log: Callable[[str], None]) -> None:
        """Before the optimizer's groups: nothing to shard under DDP."""

    def before_wrap(self, model) -> None:
        """Before the levers' hooks and ``prepare``: fp8_scaled's weight buffers are never broadcast by DDP."""
        quantize.keep_out_of_ddp(model)

    def prepare(self, model, optimizer, guard: StepGuard):
        """The model and optimizer as the step uses them (``accelerator.prepare``), with the checkpoint hooks that
        write only the trainable weights and the guard's snapshot."""
        model, optimizer = self.accelerator.prepare(model, optimizer)
        _register_state_hooks(self.accelerator, guard)
        self.model, self.optimizer, self.guard = model, optimizer, guard
        return model, optimizer

    # ---- the step ----------------------------------------------------------------------------
    def set_gradient_sync(self, last_micro_batch: bool) -> None:
        """Before a micro-batch's backward (DDP: ``accelerator.accumulate`` decides)."""

    def clip(self, model, max_norm: float) -> torch.Tensor:
        """Total gradient norm (all ranks agree: DDP grads are already reduced), clipped when max_norm > 0.

        Under fp16 the gradients are unscaled here even without clipping: that fills GradScaler's ``found_inf``,
        into which the guard folds its skip decision (left empty, the scaler would decide alone at its step and
        apply an update the guard skipped).
        """
        accelerator = self.accelerator
        params = [p for p in model.parameters() if p.grad is not None]
        if max_norm > 0:
            return accelerator.clip_grad_norm_(params, max_norm)
        if accelerator.scaler is not None:
            accelerator.unscale_gradients()
        return torch.nn.utils.get_total_norm([p.grad for p in params])

    def unwrap(self, model):
        """The model without its DDP wrapper."""
        return self.accelerator.unwrap_model(model)

    # ---- checkpoints -------------------------------------------------------------------------
    def save_state(self, folder: Path) -> None:
        """This rank's share of a checkpoint's weights and optimizer state (accelerate's ``save_state``: the main
        process writes, through the hooks :meth:`prepare` registered)."""
        self.accelerator.save_state(str(folder))

    def load_state(self, folder: Path) -> None:
        """Inverse of :meth:`save_state`."""
        self.accelerator.load_state(str(folder))

    # ---- evaluations and the export ------------------------------------------------------------
    def after_evaluation(self, model) -> None:
        """After forwards outside the step (the held-out loss): nothing to free under DDP."""

    def full_trainables(self) -> dict[str, torch.Tensor] | None:
        """The trainable weights gathered whole for the export (every rank calls it); None: read them from the
        model."""
        return None

    def release_for_samples(self, model) -> None:
        """The trained copy is saved; move it off the accelerator so the base and a fresh pipeline fit."""
        model.to("cpu")

    def summary_name(self) -> str:
        """What ran, for the summary: NO, MULTI_GPU or MULTI_CPU (accelerate's distributed type)."""
        return self.accelerator.distributed_type.value


class FSDP2Engine(DDPEngine):
    """FSDP2 (:mod:`.fsdp2`): every block then the root sharded with ``fully_shard`` before the optimizer is built,
    the model never passed to ``prepare``, gradients reduce-scattered at an update's last micro-batch, the
    checkpoints written by every rank in shards (:mod:`.sharded_checkpoint`)."""

    name: ClassVar[str] = "fsdp2"
    sharded: ClassVar[bool] = True
    replays: ClassVar[bool] = False  # a sharded model's step cannot be replayed module by module
    samples_on_every_rank: ClassVar[bool] = True  # every process takes part in the sharded forwards

    def __init__(self, choice: EngineChoice) -> None:
        super().__init__(choice)
        self.sharding: fsdp2.Sharded | None = None

    def check_options(self, cfg: TrainConfig) -> None:
        fsdp2.check_options(cfg)

    def start_note(self) -> str | None:
        return f"engine: FSDP2 ({'; '.join(self.choice.reasons)})"

    def plan_note(self, processes: int) -> str:
        return f" (FSDP2, sharded over {processes})"

    def _launch_view(self) -> contextlib.AbstractContextManager:
        return fsdp2.accelerate_sees_no_fsdp()

    def bring_waiting(self, model, paths, blocks_to_swap: int, device, log: Callable[[str], None]) -> None:
        """Nothing: the blocks stay in host memory until :meth:`shard` brings them one at a time."""

    def canary_place(self, device: torch.device) -> Callable:
        # the blocks wait in host memory until sharding; each tested attention module alone comes to the device
        # (a sharded model's submodules could not run outside their block's forward)
        return functools.partial(fsdp2.brought_in, device=device)

    def shard(self, model, info, *, train_backbone: bool, log: Callable[[str], None]) -> None:
        """Before the groups: the optimizer must hold the sharded (DTensor) parameters."""
        self.sharding = fsdp2.shard(
            model,
            info.block_lists,
            self.accelerator.device,
            train_backbone=train_backbone,
            shared=info.fsdp_shared_modules,
        )
        log(fsdp2.describe(self.sharding.counts, self.accelerator.num_processes, self.sharding.sync_each_micro_batch))

    def before_wrap(self, model) -> None:
        """Nothing: the model is never wrapped by DDP."""

    def prepare(self, model, optimizer, guard: StepGuard):
        """The model as sharded (never passed to ``prepare``: DDP would wrap it) and the optimizer wrapped
        unregistered (:func:`.fsdp2.wrap_optimizer`); its checkpoint is :mod:`.sharded_checkpoint`'s."""
        self.model, self.optimizer, self.guard = model, fsdp2.wrap_optimizer(optimizer), guard
        return self.model, self.optimizer

    def _sharded(self) -> fsdp2.Sharded:
        assert self.sharding is not None, "FSDP2Engine.shard runs before the step"
        return self.sharding

    def set_gradient_sync(self, last_micro_batch: bool) -> None:
        """Reduce-scatter at the update's last micro-batch only (or every one: --train_backbone)."""
        self._sharded().set_gradient_sync(last_micro_batch)

    def clip(self, model, max_norm: float) -> torch.Tensor:
        """Sharded gradients: a device all-reduce of the partial norms, no host sync."""
        return self._sharded().clip(max_norm)

    def save_state(self, folder: Path) -> None:
        """Every rank its shards of the weights, optimizer state and guard snapshot."""
        assert self.guard is not None
        sharded_checkpoint.save_sharded(folder, self.model, self.optimizer.optimizer, self.guard)

    def load_state(self, folder: Path) -> None:
        assert self.guard is not None
        sharded_checkpoint.load_sharded(folder, self.model, self.optimizer.optimizer, self.guard)

    def after_evaluation(self, model) -> None:
        """Free the gathered weights the forwards left (the root and each list's last block keep theirs after a
        forward, for the backward that follows in training): a checkpoint saved next must see the sharded
        parameters the optimizer holds. Local, no collective."""
        from torch.distributed.fsdp import FSDPModule

        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    def full_trainables(self) -> dict[str, torch.Tensor] | None:
        """The trainable weights gathered whole once, every rank taking part; the main process keeps them."""
        return self._sharded().full_trainables()

    def release_for_samples(self, model) -> None:
        """Nothing: a sharded model holds 1/N of the weights, left where it is."""

    def summary_name(self) -> str:
        return "FSDP2"  # accelerate's state is a plain multi-process one


def make_engine(choice: EngineChoice) -> DDPEngine:
    """The engine object for the launch's choice (:func:`dit_lora.core.engine.decide_engine`)."""
    return {"ddp": DDPEngine, "fsdp2": FSDP2Engine}[choice.name](choice)


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


__all__ = ["DDPEngine", "FSDP2Engine", "make_engine"]
