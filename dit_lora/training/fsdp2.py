"""FSDP2: the model sharded with torch's ``fully_shard`` across the processes of one launch, applied by dit-lora.

``dit-lora launch --config_file accelerate_configs/fsdp2.yaml`` starts the processes (:mod:`dit_lora.core.engine`
decides the engine from the launch). dit-lora, not accelerate, shards the model, the same code on GPUs (nccl) and
on CPU processes (gloo, the tests):

* the Accelerator is built as for a plain data-parallel launch (:func:`accelerate_sees_no_fsdp`): on a GPU,
  accelerate would otherwise build its own FSDP plugin and wrap the model in ``prepare``; the model is never passed
  to ``prepare`` (it would be wrapped in DDP), only the optimizer is wrapped, unregistered (:func:`wrap_optimizer`);
* :func:`shard_model`: each transformer block of the family's block lists (``FamilyInfo.block_lists``, the lists
  block swap uses) becomes one FSDP group, then the root takes the rest, as torchtitan does; parameters become
  DTensors sharded on dim 0, the frozen bf16 base and the fp32 LoRA masters in the same groups (torch 2.13
  accepts mixed original dtypes in one group). No ``MixedPrecisionPolicy``: compute runs under the run's autocast
  and gradients are reduced in the masters' fp32, as under DDP, so both engines give the same adapter (2 processes:
  bit for bit, tests/e2e/test_fsdp2.py); a ``param_dtype`` of bf16 would gather the LoRA weights in bf16. Buffers
  are not sharded: ``--quantize_base fp8_scaled``'s uint8/int32 weight buffers stay whole on every rank;
* the model loads straight into shards: the family's loader parks every block in host memory
  (:func:`dit_lora.modeling.block_swap.park_blocks` under FSDP2), :func:`shard_model` brings one block at a time to
  the device to shard it, and the attention canary brings only the module it tests (:func:`brought_in`), so no
  process ever holds the whole model on its device;
* :class:`Sharded` is what the loop asks of the engine: gradient sync per micro-batch, clipping on the sharded
  gradients (one device all-reduce of the partial norms, no host sync), the trainable weights gathered for the
  adapter (every rank takes part, the main process keeps them on the CPU).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from dit_lora.config import TrainConfig, optimizers
from dit_lora.core.engine import FSDP2_CONFIG, USE_FSDP_VAR
from dit_lora.core.errors import UserError
from dit_lora.modeling.block_swap import block_lists
from dit_lora.modeling.host_parking import set_tensor, unpark


def check_options(cfg: TrainConfig) -> None:
    """Refuse, before anything loads, the options FSDP2 does not combine with, in one paragraph naming the fix."""
    clashes = []
    if cfg.performance.blocks_to_swap:
        clashes.append(
            f"--blocks_to_swap {cfg.performance.blocks_to_swap} (block swap moves whole blocks between host and device; FSDP2 "
            "already keeps 1/N of each block per process: drop --blocks_to_swap)"
        )
    if cfg.model.quantize_base in ("nf4", "int8", "fp8"):
        clashes.append(
            f"--quantize_base {cfg.model.quantize_base} (its quantized weights are library tensor subclasses with packed "
            "data and quantization state, which fully_shard cannot split as plain tensors: use --quantize_base "
            "fp8_scaled, whose weights FSDP2 keeps whole on each process, or none)"
        )
    if cfg.performance.compile != "off":
        clashes.append(f"--compile {cfg.performance.compile} (not verified with sharded blocks: use --compile off)")
    for entry in optimizers.in_use(cfg.training):  # the optimizer table says which FSDP2 does not take, and why
        if entry.fsdp2_refusal is not None:
            clashes.append(f"{entry.flag} ({entry.fsdp2_refusal})")
    if cfg.training.mixed_precision == "fp16":
        clashes.append(
            "--mixed_precision fp16 (its gradient scaler is not verified on sharded gradients: use bf16, or no)"
        )
    if cfg.training.use_ema:
        clashes.append(
            "--use_ema (the EMA is kept and checkpointed whole, not as shards of the sharded weights: drop --use_ema "
            "under FSDP2)"
        )
    if not clashes:
        return
    raise UserError(
        f"FSDP2 (launched with {FSDP2_CONFIG}) does not combine with "
        + "; ".join(clashes)
        + ". Change those options, or launch with accelerate_configs/multi_gpu.yaml (DDP) if the model fits one GPU."
    )


@contextlib.contextmanager
def accelerate_sees_no_fsdp() -> Iterator[None]:
    """While the Accelerator is built: hide the FSDP launch from accelerate, so its state is a plain multi-process
    one (MULTI_GPU on nccl, MULTI_CPU on gloo, one process group either way) and it builds no FSDP plugin of its
    own. accelerate reads the variable only while its state is built."""
    saved = os.environ.pop(USE_FSDP_VAR, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[USE_FSDP_VAR] = saved


@dataclass(frozen=True)
class ShardCounts:
    """What :func:`shard_model` sharded: FSDP groups, sharded parameters (trainable among them), whole buffers."""

    blocks: int
    from_host: int  #: blocks the loader had parked in host memory, brought to the device one at a time
    parameters: int
    trainable: int
    buffers: int
    buffer_bytes: int


def device_mesh(device: torch.device):
    """The one-dimensional mesh of every process of the launch, on ``device``'s type (cpu: gloo, cuda: nccl)."""
    from torch.distributed.device_mesh import init_device_mesh

    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    return init_device_mesh(device.type, (world,))


def shard_model(
    model: nn.Module, paths: Sequence[str], device: torch.device, shared: Sequence[str] = ()
) -> ShardCounts:
    """``fully_shard`` every block of the block lists ``paths`` names on ``model``, then ``model`` itself; the modules
    ``shared`` names (``FamilyInfo.fsdp_shared_modules``: called outside their block too) first, each on its own.

    Call before the optimizer is built: sharding replaces the parameters with DTensor parameters. The blocks the
    family's loader parked in host memory (every block, under FSDP2) come to ``device`` one at a time, each sharded
    before the next. Blocks reshard
    after their forward (their gathered weights are freed until backward needs them), except each list's last one,
    whose backward comes first; nor does the root, whose backward starts right after the forward (torchtitan's
    choices for its llama and Flux models).
    """
    from torch.distributed.fsdp import fully_shard

    mesh = device_mesh(device)
    blocks = from_host = 0
    own = [model.get_submodule(path) for path in shared if _has_submodule(model, path)]
    for blocks_of_list in block_lists(model, paths):
        with_weights = [block for block in blocks_of_list if any(True for _ in block.parameters())]
        for i, block in enumerate(with_weights):
            # parked in host memory since the load (block_swap.park_blocks under FSDP2): fully_shard copies this
            # block's host tensors to the mesh's device (_move_states_to_device) and keeps this rank's shards, so
            # the device holds the shards so far plus this one block whole
            from_host += unpark(block)
            for module in own:  # its own unit inside the block's: its weights are gathered wherever it is called
                if any(m is module for m in block.modules()):
                    fully_shard(module, mesh=mesh)
            fully_shard(block, mesh=mesh, reshard_after_forward=i < len(with_weights) - 1)
            blocks += 1
    for module in model.modules():  # a parked block with no weights, or outside ``paths``: the root moves it
        unpark(module)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    params = list(model.parameters())
    buffers = list(model.buffers())
    return ShardCounts(
        blocks=blocks,
        from_host=from_host,
        parameters=len(params),
        trainable=sum(p.requires_grad for p in params),
        buffers=len(buffers),
        buffer_bytes=sum(b.numel() * b.element_size() for b in buffers),
    )


def _has_submodule(model: nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path)
    except AttributeError:
        return False
    return True


@contextlib.contextmanager
def brought_in(module: nn.Module, device: torch.device) -> Iterator[None]:
    """While inside: every tensor of ``module`` (a part of a block parked in host memory until sharding, such as
    the attention canary's attention module) on ``device``; afterwards each points at its host data again (the
    same tensor objects: PEFT and the park state hold them). Nothing is copied back: nothing here trains."""
    moved = []
    with torch.no_grad():
        for tensor in (*module.parameters(), *module.buffers()):
            if tensor.device != device:
                moved.append((tensor, tensor.data))
                set_tensor(tensor, tensor.data.to(device))
    try:
        yield
    finally:
        for tensor, host in moved:
            set_tensor(tensor, host)


def describe(counts: ShardCounts, world: int, sync_each_micro_batch: bool) -> str:
    """The start-of-run line about the sharding."""
    whole = (
        f"; {counts.buffers} buffer(s) ({counts.buffer_bytes / 2**20:.1f} MiB) stay whole on every process (buffers "
        "are not sharded: --quantize_base fp8_scaled keeps its weights in them)"
        if counts.buffers
        else ""
    )
    accumulation = (
        "gradients reduce-scattered at every micro-batch (--train_backbone: the full gradients of an accumulation "
        "would not fit where sharding is needed)"
        if sync_each_micro_batch
        else "gradients reduce-scattered at the last micro-batch of each update only"
    )
    loaded = (
        f", {counts.from_host} of them brought from host memory one at a time (no process held the whole model "
        "on its device)"
        if counts.from_host
        else ""
    )
    return (
        f"FSDP2: {counts.blocks} transformer block(s) and the root sharded over {world} process(es){loaded} "
        f"({counts.parameters} parameters, {counts.trainable} trainable, as DTensors){whole}; {accumulation}"
    )


class Sharded:
    """The engine's side of a sharded run: what the loop, the checkpoints and the export ask of it."""

    def __init__(self, model: nn.Module, counts: ShardCounts, *, sync_each_micro_batch: bool) -> None:
        self.model, self.counts, self.sync_each_micro_batch = model, counts, sync_each_micro_batch

    def set_gradient_sync(self, last_micro_batch: bool) -> None:
        """Before a micro-batch's backward: reduce-scatter its gradients only at the update's last micro-batch
        (LoRA: the unsharded gradients kept meanwhile are small), or at every one (``sync_each_micro_batch``)."""
        sync = last_micro_batch or self.sync_each_micro_batch
        self.model.set_requires_gradient_sync(sync)  # type: ignore[operator]  # FSDPModule's method

    def clip(self, max_norm: float) -> torch.Tensor:
        """The total norm of the sharded gradients (a plain device scalar, identical on every rank: the partial
        norms are all-reduced on the device), with the gradients clipped to ``max_norm`` when it is above 0."""
        from torch.distributed.tensor import DTensor

        params = [p for p in self.model.parameters() if p.grad is not None]
        total = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        if isinstance(total, DTensor):
            total = total.full_tensor()
        if max_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return total

    def full_trainables(self) -> dict[str, torch.Tensor]:
        """Every trainable weight gathered whole (a collective: every rank calls it, in the same order); the main
        process gets them on the CPU, the others an empty dict."""
        from torch.distributed.tensor import DTensor

        main = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
        out = {}
        for name, p in self.model.named_parameters():
            if not p.requires_grad:
                continue
            full = p.full_tensor() if isinstance(p, DTensor) else p
            if main:
                out[name] = full.detach().cpu().contiguous()
        return out


def shard(
    model: nn.Module, paths: Sequence[str], device: torch.device, *, train_backbone: bool, shared: Sequence[str] = ()
) -> Sharded:
    """Shard ``model`` (:func:`shard_model`) and return its :class:`Sharded`."""
    # The root returns a view (diffusers' unpatchify); FSDP2 warns that an in-place op on it would skip its
    # pre-backward hook. The families' losses read the prediction out of place (a test of the adapter against a
    # DDP run would see wrong gradients otherwise), so the warning, printed per process, is noise here.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    counts = shard_model(model, paths, device, shared)
    return Sharded(model, counts, sync_each_micro_batch=train_backbone)


def wrap_optimizer(optimizer: torch.optim.Optimizer):
    """accelerate's optimizer wrapper (its ``zero_grad`` waits for the update's last micro-batch, as under DDP)
    without registering it: ``save_state`` would pickle the sharded state from the main process only; the sharded
    checkpoint writes it (:mod:`.sharded_checkpoint`)."""
    from accelerate.optimizer import AcceleratedOptimizer

    return AcceleratedOptimizer(optimizer, device_placement=False, scaler=None)


__all__ = [
    "ShardCounts",
    "Sharded",
    "accelerate_sees_no_fsdp",
    "brought_in",
    "check_options",
    "describe",
    "device_mesh",
    "shard",
    "shard_model",
    "wrap_optimizer",
]
