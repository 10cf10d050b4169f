"""Predict a run's peak memory and FLOPs per step without loading a weight.

The family builds its components from their configs on the meta device (:meth:`plan_components`),
the run's own :func:`~dit_lora.modeling.trainables.attach_trainables` adds LoRA, backbone groups, fp32
masters and checkpointing, and one micro-batch per bucket goes through the family's own ``encode_images``
(the cache step) and ``compute_loss`` + backward on fake tensors, counted by
:class:`~dit_lora.plan.fake.LiveBytes` and ``torch.utils.flop_counter.FlopCounterMode``.

Repeated blocks are identical, so the step is traced at two and at three blocks (:data:`TRACE_DEPTHS`) and
extrapolated linearly to the model's depth: a 28-block trace costs what a 3-block one does, and activations,
gradients and FLOPs all grow by the same amount per block from the second block on. The first block is not
like the others: its input needs no gradient (the patch embedding before it is frozen), so its backward keeps
less; extrapolating from one and two blocks took that lighter block's growth for every block's and overstated
Wan's checkpointed step (1.3B at 81 x 480 x 832: 11.8 GiB against the full trace's 6.5, ``benchmarks/
wan/step_gpu.py``). Weights are counted at full depth from the meta modules.

What a process holds at its peak:
- caching phase (diffusion with ``--cache_latents``): every component's weights plus one encode call;
- training phase: the trained model's weights (encoders released after caching), the optimizer's two
  moments (fp32, or bitsandbytes' 8-bit ones with ``--use_8bit_adam``: :func:`adam_moment_bytes`; torchao's 8-bit or
  4-bit ones with ``--optimizer adamw8bit|adamw4bit``: :func:`lowbit_adam_state_bytes`), the guard's
  rollback snapshot (parameters and moments), DDP's gradient buckets, and the
  step's activations and gradients.
On a CPU, where a run reports its peak resident size, the Python process itself is added (measured here),
and weights count as resident as :mod:`.resident` describes: a component loaded in its stored dtype is
memory-mapped and counts in the caching phase only for the parameters the encode trace read (the trained
model, first read after caching, not at all); a component converted at load counts in full, and a loading
phase holds every converted component plus the largest converted one's stored bytes (its source pages,
mapped beside the copy while it loads). The training step's live bytes are multiplied by
:data:`CPU_HEAP_FACTOR` there: glibc's heap keeps a step's freed activations in pieces the next activation
does not fit, so a step's resident growth is a multiple of its live peak. (The no-grad encode of the caching
phase frees as it goes: applied to it, a factor of 2.2 over-predicted DiT's peaks by 44%.)

``--blocks_to_swap N`` (:mod:`dit_lora.modeling.block_swap`) takes the swapped blocks' frozen bytes off the trained
model's resident weights on an accelerator, in the caching and the training phase, and adds back the blocks in flight
(:data:`SWAP_IN_FLIGHT`); on a CPU host memory is the device's, so only the in-flight copies count, as a cost.

``--activation_offloading`` moves every tensor autograd saves for backward to host memory and brings it back for
backward; with ``--gradient_checkpointing`` those are the checkpointed blocks' inputs, so the device keeps the ones in
flight (the block being recomputed and the next one arriving) beside the recomputation's own peak. The trace at
:data:`TRACE_DEPTHS`' first depth holds exactly that many blocks' saved inputs and one recomputation, so its peak
is the step's activations with offloading (:attr:`StepTrace.offloaded_bytes`; a conservative figure: what layers
outside the blocks save is offloaded too in the run, and counted here). On a CPU the host is the device: no saving.

``engine="fsdp2"`` (torch's ``fully_shard`` over ``num_processes`` ranks) divides the trained model's parameters,
the optimizer's moments and the guard's snapshot by the number of ranks and adds the unsharded weights of
:data:`FSDP2_UNSHARDED_BLOCKS` blocks, the root's (the parameters outside the blocks: torch keeps the root unsharded
from its forward to the end of its backward) and one all-gather's output (a whole block, copied out into the
unsharded parameters and then freed; the input is a view of it: ``foreach_all_gather``). The rule, from torch's FSDP notes (docs.pytorch.org/docs/stable/notes/
fsdp.html, "FSDP Prefetch Nuances") and the ``fully_shard`` contract (docs.pytorch.org/docs/stable/distributed.
fsdp.fully_shard.html): outside a block's forward and backward its parameters are sharded; before them they are
all-gathered, and the next block's all-gather is issued on a separate stream while the current block computes
(implicit forward prefetching; backward prefetching is on by default), so a rank holds two blocks unsharded at
once; after them the unsharded copy is freed (``reshard_after_forward=True``, torchtitan's default). Buffers are
not parameters and are not sharded: ``--quantize_base fp8_scaled`` keeps its fp8 weights and scales in buffers
(:mod:`dit_lora.modeling.fp8_scaled`), so they stay whole on every rank. Gradients are reduce-scattered block by block
(the ``fully_shard`` contract), so a rank keeps its shard of the trainable parameters' gradients, which the step's
trace holds whole. Activations are per rank, unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import os
import platform
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from dit_lora.catalogue import by_hub_id, lookup
from dit_lora.config import TrainConfig
from dit_lora.config.schema import ModelOptions
from dit_lora.contract import spec as fallback
from dit_lora.contract.capabilities import MemoryPlan
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.modeling import block_swap, cache_parking, quantize
from dit_lora.modeling.trainables import attach_trainables
from dit_lora.output.report import load_pyplot
from dit_lora.plan import resident, trace_cache
from dit_lora.plan.fake import (
    LiveBytes,
    ReadTensors,
    fake_mode,
    fake_module,
    fused_attention,
    meta_init_skipped,
    module_bytes,
)

#: On a CPU with glibc, resident growth of training steps over the live bytes their operators keep, without and
#: with activation checkpointing: the medians over ``benchmarks/plan/cpu_heap_factor.py``'s cases (Sana, DiT,
#: CogVideoX transformers; batch 1-16; fp32 and bf16; 16 steps each): 1.79-2.59 without (6 cases), 2.58-3.36
#: with (5 cases; benchmarks/RESULTS.md); doubling a case's batch leaves its factor within that spread, so it
#: is a ratio, not a fixed cost. glibc puts a step's small allocations (tensor headers, autograd nodes) into the
#: holes its freed activations leave, so the next activation of the same size no longer fits there and the
#: heap grows instead; a checkpointed step recomputes each block inside the backward, between the gradients'
#: allocations, and leaves more such holes. Measured with ``--cpu_reuse_memory``; glibc's defaults grow the
#: heap alike (476 vs 455 MiB for one Sana step), so the factor does not depend on that flag.
CPU_HEAP_FACTOR = {False: 1.96, True: 2.85}
#: the depths a step is traced at before extrapolating (module docstring: the first block is lighter than the rest,
#: so the per-block growth is read between blocks two and three); a model this deep or shallower is traced whole
TRACE_DEPTHS = (2, 3)
#: --blocks_to_swap: swapped blocks whose device copies live at once (never more than are swapped): the one computing
#: and the next one arriving (``tests/modeling/test_block_swap.py`` measures two on the CPU), and on an accelerator
#: one more, the one just left, whose memory the allocator reuses only once the compute stream has passed it
#: (``record_stream``)
SWAP_IN_FLIGHT = {"cpu": 2, "accelerator": 3}
#: --activation_offloading: checkpointed blocks' saved inputs on the device at once (the block recomputing in the
#: backward, whose input came back, and the next one prefetched); equals TRACE_DEPTHS[0], whose trace holds them
OFFLOAD_IN_FLIGHT = 2
#: engine="fsdp2": blocks whose weights are all-gathered (unsharded) at once: the one computing and the next one
#: prefetched (module docstring)
FSDP2_UNSHARDED_BLOCKS = 2
#: engine="ddp" on several processes: torch DDP's ``broadcast_bucket_size`` (250 MiB). At the wrap, every rank
#: flattens the model's parameters and buffers into buckets of at most this size for rank 0's broadcast of its
#: weights (``_sync_module_states``), one bucket alive at a time, beside the weights themselves
DDP_BROADCAST_BUCKET = 250 * 2**20
#: --quantize_base schemes whose savings the plan records for the ladder (plan/ladder.py)
SCHEMES = ("nf4", "int8", "fp8", "fp8_scaled")


@dataclass
class StepTrace:
    """One micro-batch of one bucket, extrapolated to the model's depth."""

    bucket: str
    checkpointing: bool
    activation_bytes: int  # live bytes at the step's peak: activations, gradients, the batch
    flops: int  # forward + backward of one micro-batch
    #: the same with --activation_offloading (:data:`OFFLOAD_IN_FLIGHT` blocks' saved tensors on the device); None:
    #: not known (a model traced whole, too shallow to tell a block's share): no saving claimed
    offloaded_bytes: int | None = None


@dataclass
class Plan:
    """The prediction for one configuration (see the module docstring for what each figure holds)."""

    model: str
    family: str
    catalogue_entry: str | None
    device: str
    num_processes: int
    train_batch_size: int
    gradient_accumulation_steps: int
    depth: int
    weights: dict[str, int]  # component -> bytes as loaded
    trained_component: str
    trainable_params: int
    optimizer_bytes: int
    snapshot_bytes: int
    ddp_bytes: int
    cache_phase_bytes: int | None  # None: nothing is cached (video LLMs, --cache_latents false)
    encoders_in_training: bool
    process_bytes: int  # the Python process itself (CPU only)
    checkpointing: bool  # the run's setting
    steps: list[StepTrace] = field(default_factory=list)
    quantized: str | None = None  # --quantize_base: the trained model's Linear weights counted at that size
    text_encoder_quantized: bool = False  # --quantize_text_encoder: the text encoder's Linear weights at nf4 size
    load_phase_bytes: int | None = None  # CPU: converted weights + one component's stored copy; None: no conversion
    mapped: list[str] = field(default_factory=list)  # CPU: components memory-mapped in their stored dtype
    heap_factor: float = 1.0  # resident bytes per live byte of a training step (CPU_HEAP_FACTOR on a CPU) ...
    heap_factor_checkpointed: float = 1.0  # ... and of a checkpointed one
    #: bytes ``--quantize_base nf4`` / ``--quantize_text_encoder`` would save (0 when already on), for the advice
    nf4_model_savings: int = 0
    nf4_text_encoder_savings: int = 0
    blocks_to_swap: int = 0  #: --blocks_to_swap
    swapped_bytes: int = 0  #: the swapped blocks' frozen weights, kept in host memory
    swap_in_flight_bytes: int = 0  #: the most of them on the device at once (:data:`SWAP_IN_FLIGHT` blocks)
    dequant_bytes: int = 0  #: --quantize_base fp8_scaled: the largest Linear weight dequantized while it runs
    activation_offloading: bool = False  #: --activation_offloading (StepTrace.offloaded_bytes on an accelerator)
    engine: str = "ddp"  #: "ddp" (a whole model per process) or "fsdp2" (sharded over num_processes)
    #: what the ladder (plan/ladder.py) needs to predict other settings without tracing again:
    model_built_bytes: int = 0  #: the trained model's bytes unquantized, as built (LoRA included)
    block_sizes: list[list[int]] = field(default_factory=list)  #: per block list, each block's frozen bytes as built
    quantize_savings: dict[str, int] = field(default_factory=dict)  #: scheme -> bytes it saves on the unquantized model
    fp8_dequant_bytes: int = 0  #: dequant_bytes under --quantize_base fp8_scaled
    fp8_linear_bytes: int = 0  #: the quantizable Linear weights at fp8_scaled size (buffers: FSDP2 does not shard)
    encode_peak_bytes: int = 0  #: the caching phase's one encode call (it scales with the tokens, as a step does)
    #: --use_ema on the device: the fp32 EMA of the trainable weights and its rollback snapshot (training/ema.py)
    ema_bytes: int = 0
    eight_bit_adam: bool = False  #: --use_8bit_adam: optimizer_bytes are bitsandbytes' 8-bit moments
    optimizer: str = "adamw"  #: --optimizer (whose state optimizer_bytes counts)
    #: the run's blocks wait in host memory while the cache is built (modeling/cache_parking.py) where the base
    #: allows it: a cached run whose family lets them (:meth:`cache_parked_bytes`)
    blocks_wait: bool = False
    #: on an accelerator, the host memory (plan/host.py): per component the bytes its files hold, the components
    #: converted at load (their loaded bytes), and an EMA kept in host memory (--ema_device cpu)
    host_stored: dict[str, int] = field(default_factory=dict)
    host_converted: dict[str, int] = field(default_factory=dict)
    ema_host_bytes: int = 0
    #: the run's images take one fixed size (``--aspect_buckets WxH``): the ladder cuts that size, not --resolution
    fixed_size: bool = False

    def cache_parked_bytes(self) -> int:
        """The trained model's bytes the caching phase does not hold on the device (:func:`cache_parked`)."""
        scale = self.weights[self.trained_component] / max(self.model_built_bytes, 1)
        return cache_parked(self, self.block_sizes, scale, self.swapped_bytes)

    @property
    def swap_saving(self) -> int:
        """What --blocks_to_swap takes off the trained model's resident weights: the swapped blocks' bytes less the
        blocks in flight (on a CPU, where host memory is the device's, only the in-flight copies: negative)."""
        return (0 if self.device == "cpu" else self.swapped_bytes) - self.swap_in_flight_bytes

    @property
    def shards(self) -> int:
        """Ranks the trained model's parameters and optimizer state are split over (1 unless FSDP2)."""
        return max(self.num_processes, 1) if self.engine == "fsdp2" else 1

    def model_on_device(self) -> int:
        """The trained model's weights one process holds: all of them less what block swap parks, or under FSDP2 its
        shard of the parameters, the buffers whole (fp8_scaled's weights) and what a step gathers
        (:meth:`fsdp2_gathered_bytes`)."""
        model = self.weights[self.trained_component]
        if self.shards == 1:
            return model - self.swap_saving + self.dequant_bytes
        replicated = self.fp8_linear_bytes if self.quantized == "fp8_scaled" else 0
        sharded = max(model - replicated, 0)
        return replicated + sharded // self.shards + self.fsdp2_gathered_bytes() + self.dequant_bytes

    def fsdp2_gathered_bytes(self) -> int:
        """Under FSDP2, the weights a step all-gathers that are alive at once (module docstring): the root's (the
        parameters outside the blocks, gathered at the forward's start and kept until the backward ends),
        :data:`FSDP2_UNSHARDED_BLOCKS` blocks' and the output of the all-gather in flight (a block whole, copied out
        into the block's parameters; its input is a view of it). On a CPU they are allocated and freed every step
        as activations are, so they count times the heap factor."""
        if self.shards == 1:
            return 0
        replicated = self.fp8_linear_bytes if self.quantized == "fp8_scaled" else 0
        share = max(self.weights[self.trained_component] - replicated, 0) / max(self.model_built_bytes, 1)
        blocks = [size for sizes in self.block_sizes for size in sizes]
        block = max(blocks, default=0) * share  # a block's part of the sharded bytes
        root = max(self.model_built_bytes - sum(blocks), 0) * share
        gathered = root + (FSDP2_UNSHARDED_BLOCKS + 1) * block
        return int(gathered * self.heap_factor)

    def sharded_gradient_saving(self) -> int:
        """Under FSDP2, the trainable parameters' gradients (fp32, in the step's trace whole) less a rank's shard: each
        block's are reduce-scattered right after its backward, so a rank keeps 1/shards of them."""
        return 4 * self.trainable_params * (self.shards - 1) // self.shards

    def train_phase_bytes(self, checkpointing: bool | None = None) -> int:
        """Peak of the training phase at the run's (or the given) checkpointing setting, over buckets."""
        gc = self.checkpointing if checkpointing is None else checkpointing
        held = self.model_on_device() - self.sharded_gradient_saving()
        held += (self.optimizer_bytes + self.snapshot_bytes) // self.shards + self.ddp_bytes + self.ema_bytes
        if self.encoders_in_training:
            held += sum(v for k, v in self.weights.items() if k != self.trained_component)
        return held + self.resident_activations(gc)

    def resident_activations(self, checkpointing: bool | None = None) -> int:
        """The largest bucket's step activations as the device holds them (live bytes x the heap factor)."""
        gc = self.checkpointing if checkpointing is None else checkpointing
        factor = self.heap_factor_checkpointed if gc else self.heap_factor
        return int(factor * max(self.step_bytes(s) for s in self.steps if s.checkpointing == gc))

    def step_bytes(self, step: StepTrace) -> int:
        """``step``'s live bytes on the device: with --activation_offloading on an accelerator, the offloaded figure."""
        offloads = self.activation_offloading and self.device != "cpu" and step.offloaded_bytes is not None
        return int(step.offloaded_bytes) if offloads and step.offloaded_bytes is not None else step.activation_bytes

    def offloaded_host_bytes(self, checkpointing: bool | None = None) -> int:
        """The pinned host memory --activation_offloading fills: the saved tensors that left the device."""
        gc = self.checkpointing if checkpointing is None else checkpointing
        steps = [s for s in self.steps if s.checkpointing == gc]
        if not self.activation_offloading or self.device == "cpu" or not steps:
            return 0
        return max(s.activation_bytes - self.step_bytes(s) for s in steps)

    def ddp_start_bytes(self) -> int:
        """The wrap of a DDP run on several processes (0 otherwise): the trained model's weights, all read by the
        broadcast of rank 0's (on a CPU, memory-mapped pages become resident), and one flattened bucket of what DDP
        broadcasts (:data:`DDP_BROADCAST_BUCKET` at most; parked blocks and fp8_scaled's buffers are kept out)."""
        if self.engine != "ddp" or self.num_processes <= 1:
            return 0
        kept_out = self.swapped_bytes + (self.fp8_linear_bytes if self.quantized == "fp8_scaled" else 0)
        broadcast = max(self.weights[self.trained_component] - kept_out, 0)
        held = self.model_on_device() - self.dequant_bytes + min(DDP_BROADCAST_BUCKET, broadcast)
        if self.encoders_in_training:
            held += sum(v for k, v in self.weights.items() if k != self.trained_component)
        return held

    def phases(self, checkpointing: bool | None = None) -> dict[str, int]:
        """Each phase's bytes beside the process itself: training, caching, loading and DDP's wrap."""
        return {
            "training": self.train_phase_bytes(checkpointing),
            "caching": self.cache_phase_bytes or 0,
            "loading": self.load_phase_bytes or 0,
            "ddp_start": self.ddp_start_bytes(),
        }

    def peak_bytes(self, checkpointing: bool | None = None) -> int:
        """The figure ``train_summary.json`` reports as ``peak_memory_bytes`` on the planned device."""
        return max(self.phases(checkpointing).values()) + self.process_bytes

    @property
    def peak_memory_bytes(self) -> int:
        return self.peak_bytes()

    def flops_per_update(self) -> int:
        """FLOPs of one optimizer update on one process (micro-batches x the largest bucket's)."""
        return self.gradient_accumulation_steps * max(
            s.flops for s in self.steps if s.checkpointing == self.checkpointing
        )

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(
            peak_memory_bytes=self.peak_memory_bytes,
            train_phase_bytes=self.train_phase_bytes(),
            ddp_start_bytes=self.ddp_start_bytes(),
            flops_per_update=self.flops_per_update(),
        )
        return out


def process_resident_bytes() -> int:
    """This process's resident memory now (the Python runtime and imported libraries).

    matplotlib is imported first when it is installed: every run draws its loss curve at the end, and on a CPU
    that import (about 30 MiB resident) was the part of a small run's peak that the plan missed.
    """
    load_pyplot()
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _trace_step(spec: FamilySpec, cfg: TrainConfig, comps, batch: dict, mode) -> tuple[int, int]:
    """(peak live bytes, FLOPs) of one loss + backward on the fake model."""
    model = comps.model
    batch_bytes = sum(v.numel() * v.element_size() for v in batch.values() if isinstance(v, torch.Tensor))
    live = LiveBytes()
    generator = torch.Generator().manual_seed(0)
    with (
        mode,
        fused_attention(),
        live,
        torch.autocast("cpu", dtype=cfg.weight_dtype, enabled=cfg.training.mixed_precision != "no"),
    ):
        loss = planner(spec).plan_loss(comps, batch, generator, cfg)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return live.peak + batch_bytes, live.flops


def _build(spec: FamilySpec, cfg: TrainConfig, read, depth: int | None, checkpointing: bool):
    """Components at ``depth`` blocks with the run's trainables attached (meta device)."""
    comps = planner(spec).plan_components(cfg, read, depth)
    run_cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, gradient_checkpointing=checkpointing))
    made = attach_on_meta(comps.model, spec, run_cfg)
    comps.model.train()
    _lycoris_layers_always_on(comps.model)
    return comps, made


def attach_on_meta(model: torch.nn.Module, spec: FamilySpec, cfg: TrainConfig):
    """:func:`~dit_lora.modeling.trainables.attach_trainables` on a meta model, with the weights it adds made on the
    meta device too. PEFT makes an adapter's matrices on the default device and initialises them (random draws over
    every LoRA weight: a fifth of a Wan 14B plan's time) before moving them to their base layer's device, meta; the
    plan reads only their shapes and dtypes, which are the same (and skips the initialisers of the meta tensors:
    :func:`~dit_lora.plan.fake.meta_init_skipped`)."""
    with torch.device("meta"), meta_init_skipped():
        return attach_trainables(model, spec, cfg)


def _builds(spec: FamilySpec, cfg: TrainConfig, read, depth: int, settings: tuple[bool, ...]):
    """``(checkpointing, components)`` at ``depth`` for each setting in ``settings`` (meta device), as
    :func:`_build` makes them, from one build: the components are built once without checkpointing and copied
    for the setting that switches it on, which is all ``attach_trainables`` does differently. The copy is made
    before any trace, so a cache a step leaves (CogVideoX keeps its RoPE tables in ``comps.state``) is made and
    counted again in the other setting's trace, as in a build of its own; the frozen encoders are shared."""
    first, *rest = sorted(settings)  # without checkpointing first: a copy switches it on, never off
    comps, _ = _build(spec, cfg, read, depth, first)
    out = [(first, comps)]
    for gc in rest:
        twin = copy.deepcopy(comps, {id(part): part for part in comps.encoders.values()})
        fallback.enable_gradient_checkpointing(spec, twin.model)
        out.append((gc, twin))
    return out


def _lycoris_layers_always_on(model: torch.nn.Module) -> None:
    """LoKr and LoHa layers (PEFT's ``LycorisLayer``) in eval mode: in training their forward draws its module dropout
    on the host (``torch.rand(1) > p``), a value fake tensors cannot give; in eval mode the layer always adds its
    update, which is what a step without module dropout holds in memory (the plan's count)."""
    from peft.tuners.lycoris_utils import LycorisLayer

    for module in model.modules():
        if isinstance(module, LycorisLayer):
            module.training = False


def _traces(
    spec: FamilySpec, cfg: TrainConfig, read, full_depth: int, settings: tuple[bool, ...], *, shares: bool = True
) -> tuple[list[StepTrace], int, dict[str, float]]:
    """Step traces for every bucket and checkpointing setting in ``settings``, the peak of one encode call, and
    per component the fraction of its weight bytes that encode call read (``shares``; else none: only a CPU plan
    reads them, :func:`cpu_residency`, and watching every operator's inputs costs the encode a tenth of its time).

    One fake mode serves every trace, so the batches (the family's encode of one micro-batch per bucket) are
    made once and reused; a model of at most :data:`TRACE_DEPTHS`' deepest is traced at its own depth.
    """
    depths = TRACE_DEPTHS if full_depth > TRACE_DEPTHS[-1] else (full_depth,)
    measured: dict[tuple[str, bool], list[tuple[int, int]]] = {}
    encode_peak, batches, read_share = 0, None, {}
    mode = fake_mode()  # entered per use: the meta modules are built outside it
    for depth in depths:
        faked: set[int] = set()  # the encoders shared between a depth's builds are made fake once
        for gc, comps in _builds(spec, cfg, read, depth, settings):  # meta modules, outside the fake mode
            modules = [comps.model, *[m for m in comps.encoders.values() if isinstance(m, torch.nn.Module)]]
            for module in modules:
                if id(module) not in faked:
                    fake_module(module, mode)
                    faked.add(id(module))
            with mode:
                fallback.configure(spec, comps, cfg)
                if batches is None:
                    live, reads = LiveBytes(), ReadTensors() if shares else contextlib.nullcontext()
                    with live, reads:
                        batches = planner(spec).plan_batches(cfg, comps)
                    encode_peak = live.peak
                    if isinstance(reads, ReadTensors):
                        read_share = _read_shares(comps, reads.ids)
            for bucket, batch in batches:
                measured.setdefault((bucket, gc), []).append(_trace_step(spec, cfg, comps, batch, mode))
            del comps, modules
    out = []
    for (bucket, gc), points in measured.items():
        if len(points) == 2:  # per block: the difference; the rest: what the shallower trace holds
            (m1, f1), (m2, f2) = points
            extra = full_depth - depths[0]
            mem, flops = m1 + extra * max(m2 - m1, 0), f1 + extra * max(f2 - f1, 0)
            # --activation_offloading: the shallower trace holds OFFLOAD_IN_FLIGHT blocks' saved tensors (module
            # docstring); the blocks beyond those stay in host memory
            offloaded: int | None = min(m1 + (OFFLOAD_IN_FLIGHT - depths[0]) * max(m2 - m1, 0), mem)
        else:
            (mem, flops), offloaded = points[0], None
        out.append(StepTrace(bucket, gc, int(mem), int(flops), offloaded))
    return out, encode_peak, read_share


def _check_engine(engine: str) -> None:
    if engine not in ("ddp", "fsdp2"):
        raise ValueError(f"engine must be 'ddp' or 'fsdp2', not {engine!r}")


def _tracer(spec: FamilySpec, cfg: TrainConfig, read, full_depth: int, cache: bool):
    """``traces(settings, shares=...)``: :func:`_kept_traces` with ``cache`` (unless ``DIT_LORA_PLAN_CACHE=0``), else
    :func:`_traces`."""
    return functools.partial(_kept_traces if cache and trace_cache.enabled() else _traces, spec, cfg, read, full_depth)


def _kept_traces(
    spec: FamilySpec, cfg: TrainConfig, read, full_depth: int, settings: tuple[bool, ...], *, shares: bool = True
) -> tuple[list[StepTrace], int, dict[str, float]]:
    """:func:`_traces`, taken from :mod:`.trace_cache` when an earlier plan of the same inputs kept them."""
    traced = {"depth": full_depth, "settings": list(settings), "shares": shares}
    name = trace_cache.key(spec.name, cfg, traced)
    kept = trace_cache.lookup(name, read, _decode_traces)
    if kept is not None:
        return kept
    reader = trace_cache.RecordingReader(read)
    steps, encode_peak, read_share = _traces(spec, cfg, reader, full_depth, settings, shares=shares)
    result = {"steps": [dataclasses.asdict(s) for s in steps], "encode_peak": encode_peak, "read_share": read_share}
    trace_cache.store(name, reader, result)
    return steps, encode_peak, read_share


def _decode_traces(kept: dict) -> tuple[list[StepTrace], int, dict[str, float]]:
    steps = [StepTrace(**step) for step in kept["steps"]]
    return steps, int(kept["encode_peak"]), {str(k): float(v) for k, v in kept["read_share"].items()}


def _read_shares(comps, ids: set[int]) -> dict[str, float]:
    """Per component of ``comps``, the fraction of its weight bytes among the tensors ``ids`` (those an encode read)."""
    parts = {"model": comps.model, **{k: m for k, m in comps.encoders.items() if isinstance(m, torch.nn.Module)}}
    return {k: resident.touched_bytes(m, ids) / max(module_bytes(m), 1) for k, m in parts.items()}


def cpu_residency(
    model: ModelOptions,
    modules: dict[str, torch.nn.Module],
    weights: dict[str, int],
    read_share: dict[str, float],
    model_subfolder: str,
    copied: frozenset[str] | set[str] = frozenset(),
) -> tuple[dict[str, int], int | None, list[str]]:
    """On a CPU: each component's resident bytes in the caching phase, the loading phase's bytes, the mapped ones.

    ``model``: the run's ``cfg.model`` (where the weights are stored); ``read_share``: per component, the fraction
    of its bytes the encode trace read; ``copied``: components that load into fresh memory whatever their files
    hold (quantized ones: their quantized size is in ``weights``), which read their source pages while they load,
    as converted ones do. A component whose
    stored dtype is unknown counts in full, as before this distinction. The catalogue's stored dtype describes
    the transformer's files, so for a Hub id not downloaded only the model is placed by it.
    """
    entry = by_hub_id(str(model.pretrained_model_name_or_path or ""))
    cache, converted, mapped = dict(weights), {}, []
    for name, module in modules.items():
        stored = resident.stored_component(
            str(model.pretrained_model_name_or_path),
            model_subfolder if name == "model" else name,
            module,
            variant=model.variant,
            catalogue_dtype=entry.stored_dtype if entry is not None and name == "model" else None,
        )
        if stored is None:
            continue
        if name not in copied and stored.dtype == resident.loaded_dtype(module):
            mapped.append(name)
            cache[name] = int(weights[name] * read_share.get(name, 1.0))
        else:  # the copy stays; the source is resident only while this component loads, so one at a time.
            # Only the tensors the module loads are read: a file may hold more (CogVideoX's T5 file keeps the
            # decoder that T5EncoderModel skips), so at most the module's own tensors at the stored dtype.
            converted[name] = min(stored.nbytes, resident.stored_as(module, stored.dtype).nbytes)
    load = sum(weights[k] for k in converted) + max(converted.values()) if converted else None
    return cache, load, mapped


def block_sizes(model: torch.nn.Module, paths) -> list[list[int]]:
    """Per block list ``paths`` names on ``model``, each block's frozen bytes in execution order (what block swap
    parks of it: :func:`dit_lora.modeling.block_swap.frozen_slots`)."""
    return [
        [sum(t.numel() * t.element_size() for _, _, t in block_swap.frozen_slots(block)) for block in blocks]
        for blocks in block_swap.block_lists(model, paths)
    ]


def swap_fields(sizes: list[list[int]], count: int, device: str, scale: float) -> dict[str, int]:
    """The plan's --blocks_to_swap fields for ``count`` in ``sizes`` (:func:`block_sizes`; the last blocks of each
    list are swapped, as many as :func:`~dit_lora.modeling.block_swap.per_list_counts` says): the
    swapped blocks' frozen bytes and the blocks in flight. ``scale``: the trained model's bytes as counted over its
    bytes as built (below 1 when --quantize_base counts its linears smaller; the blocks hold nearly all of them, so
    they shrink alike)."""
    counts = block_swap.per_list_counts([len(blocks) for blocks in sizes], count)
    chosen = [size for blocks, n in zip(sizes, counts) if n > 0 for size in blocks[len(blocks) - n :]]
    # blocks of two lists can be on the device together (the last of one kept for the backward, the next arriving)
    in_flight = min(sum(counts), SWAP_IN_FLIGHT["cpu" if device == "cpu" else "accelerator"]) * max(chosen, default=0)
    return {
        "blocks_to_swap": max(count, 0),
        "swapped_bytes": int(sum(chosen) * scale),
        "swap_in_flight_bytes": int(in_flight * scale),
    }


def cache_parked(plan, sizes: list[list[int]], scale: float, swapped: int) -> int:
    """The trained model's bytes in host memory during the caching phase, of a ``plan`` (its ``device``, ``engine``,
    ``blocks_wait`` and ``quantized``; ``sizes``: :func:`block_sizes`, ``scale`` as in :func:`swap_fields`,
    ``swapped``: the swapped blocks' bytes). On an accelerator, every block's frozen bytes when they wait for the
    cache (:mod:`~dit_lora.modeling.cache_parking`) or, under FSDP2, until each is sharded alone
    (:func:`~dit_lora.modeling.block_swap.park_blocks`); else the swapped blocks'. On a CPU none (the host is the
    device)."""
    if plan.device == "cpu":
        return 0
    waits = plan.blocks_wait and plan.quantized not in block_swap.LIBRARY_QUANTIZED
    if plan.engine == "fsdp2" or waits:
        return int(sum(size for blocks in sizes for size in blocks) * scale)
    return swapped


def swap_figures(
    cfg: TrainConfig, spec: FamilySpec, model: torch.nn.Module, device: str, scale: float
) -> dict[str, int]:
    """The plan's --blocks_to_swap fields for ``model`` (full depth, trainables attached); a count the model's lists
    cannot give is refused in one paragraph, as the run refuses it (see :func:`swap_fields`)."""
    count = int(cfg.performance.blocks_to_swap)
    if count > 0:
        block_swap.swapped_blocks(model, spec.info.block_lists, count, spec.name)
    return swap_fields(block_sizes(model, spec.info.block_lists), count, device, scale)


def _depth(spec: FamilySpec, cfg: TrainConfig, read) -> tuple[int, str]:
    """The model's block count from its config (``spec.plan.depth_key``) and the trained model's subfolder; a config
    that cannot be read is one paragraph."""
    file, key = planner(spec).depth_key
    sub, _, name = file.rpartition("/")
    depth_config = read(sub, name)
    if depth_config is None:
        raise UserError(
            f"The memory plan needs `{file}` of --pretrained_model_name_or_path "
            f"`{cfg.model.pretrained_model_name_or_path}`, which is neither in that folder nor in the Hub cache, "
            "and the model is not in the catalogue (`dit-lora models`). Download the model's config "
            "files (a recipe run with --ignore_memory_plan starts without the plan)."
        )
    return int(lookup(depth_config, key)), sub


def _weights(cfg: TrainConfig, comps, quantizable: list[str]) -> tuple[dict[str, int], int, int, int]:
    """Each component's bytes as loaded (``--quantize_base``'s linears ``quantizable`` and ``--quantize_text_encoder``'s
    at their quantized size), the largest weight dequantized while it runs, and the bytes nf4 would save on the text
    encoder and on the model (0 where already quantized)."""
    weights, dequant = {"model": module_bytes(comps.model)}, 0
    if quantize.enabled(cfg.model):  # the linears the library quantizes, at their quantized size; the rest as loaded
        weights["model"] -= quantize.quantized_weight_savings(comps.model, cfg.model.quantize_base, quantizable)
        dequant = quantize.dequantized_peak_bytes(comps.model, cfg.model.quantize_base, quantizable, cfg.weight_dtype)
    weights.update({k: module_bytes(m) for k, m in comps.encoders.items() if isinstance(m, torch.nn.Module)})
    text_encoder = comps.encoders.get("text_encoder")
    te_savings = (
        0
        if text_encoder is None
        else quantize.quantized_weight_savings(  # transformers' nf4 (its
            text_encoder, "nf4", quantize.quantized_linears(text_encoder)
        )
    )  # _keep_in_fp32_modules not)
    if cfg.model.quantize_text_encoder:
        weights["text_encoder"] -= te_savings
    nf4_savings = (
        0
        if quantize.enabled(cfg.model)
        else quantize.quantized_weight_savings(comps.model, "nf4", quantizable)  # what the advice may offer
    )
    return weights, dequant, te_savings, nf4_savings


def _ladder_fields(model: torch.nn.Module, spec: FamilySpec, quantizable: list[str], dtype: torch.dtype) -> dict:
    """The plan's fields the ladder reads to predict other settings (``model``: unquantized, trainables attached;
    ``quantizable``: the Linear weights --quantize_base would quantize)."""
    modules = dict(model.named_modules())
    return {
        "model_built_bytes": module_bytes(model),
        "block_sizes": block_sizes(model, spec.info.block_lists),
        "quantize_savings": {s: quantize.quantized_weight_savings(model, s, quantizable) for s in SCHEMES},
        "fp8_dequant_bytes": quantize.dequantized_peak_bytes(model, "fp8_scaled", quantizable, dtype),
        "fp8_linear_bytes": sum(quantize.quantized_bytes(modules[n], "fp8_scaled") for n in quantizable),
    }


def planner(spec: FamilySpec) -> MemoryPlan:
    """``spec.plan`` (:class:`~dit_lora.contract.capabilities.MemoryPlan`); a family without it is one paragraph
    (``dit-lora plan`` exits 2; a run goes on without a plan)."""
    return fallback.require(spec, "plan", "The memory plan (`dit-lora plan`, and the check at the start of a run)")


def plan_run(
    cfg: TrainConfig,
    spec: FamilySpec,
    read,
    *,
    device: str = "cuda",
    num_processes: int = 1,
    catalogue_entry: str | None = None,
    both_settings: bool = True,
    capacity: int | None = None,
    engine: str = "ddp",
    cache: bool = False,
) -> Plan:
    """Predict the peak memory per process and the FLOPs of one step of ``cfg`` (defaults already resolved).

    ``engine``: ``"ddp"`` (every process holds the whole model; several add DDP's gradient buckets) or ``"fsdp2"``
    (the trained model sharded over ``num_processes``: the module docstring says what a rank holds).

    ``both_settings`` traces the step with and without activation checkpointing (the table and its advice);
    without it only the run's own setting is traced (the start-of-run gate), and the other setting too when the
    plan's peak exceeds ``capacity`` (the device's bytes; None: never): the advice on what fits weighs both, and
    the plan is still built once. ``cache``: step traces through :mod:`.trace_cache` (the gate and ``dit-lora plan``).
    """
    _check_engine(engine)
    full_depth, sub = _depth(spec, cfg, read)
    comps = planner(spec).plan_components(cfg, read)  # full depth, meta: weights by dtype
    checkpointing = attach_on_meta(comps.model, spec, cfg).checkpointing
    quantizable = quantize.quantized_linears(comps.model, fallback.quantize_skip_modules(spec, cfg))
    weights, dequant, te_savings, nf4_savings = _weights(cfg, comps, quantizable)
    swap = swap_figures(cfg, spec, comps.model, device, weights["model"] / max(module_bytes(comps.model), 1))
    cached = bool(comps.encoders) and cfg.data.cache_latents
    settings = (False, True) if both_settings else (checkpointing,)
    traces = _tracer(spec, cfg, read, full_depth, cache)
    steps, encode_peak, read_share = traces(settings, shares=device == "cpu")
    quantized = cfg.model.quantize_base if quantize.enabled(cfg.model) else None
    # the base's say is cache_parked's (a lever may change the base): here the run's and the family's
    waits = cached and cache_parking.run_caches(cfg) and _family_lets_blocks_wait(spec, cfg)
    where = types.SimpleNamespace(device=device, engine=engine, blocks_wait=waits, quantized=quantized)
    cache_weights, load_phase, mapped = _cache_phase_weights(cfg, spec, comps, weights, swap, where, read_share, sub)
    glibc_heap = device == "cpu" and platform.libc_ver()[0] == "glibc"
    plan = Plan(
        model=str(cfg.model.pretrained_model_name_or_path),
        activation_offloading=cfg.performance.activation_offloading,
        engine=engine,
        encode_peak_bytes=encode_peak if cached else 0,
        **_ladder_fields(comps.model, spec, quantizable, cfg.weight_dtype),
        family=spec.name,
        catalogue_entry=catalogue_entry,
        device=device,
        num_processes=num_processes,
        train_batch_size=cfg.training.train_batch_size,
        gradient_accumulation_steps=cfg.training.gradient_accumulation_steps,
        depth=full_depth,
        weights=weights,
        trained_component="model",
        **_trainable_fields(cfg, comps.model, device, num_processes, engine),
        cache_phase_bytes=sum(cache_weights.values()) + encode_peak if cached else None,
        encoders_in_training=bool(comps.encoders) and not cfg.data.cache_latents,
        process_bytes=process_resident_bytes() if device == "cpu" else 0,
        checkpointing=checkpointing,
        steps=steps,
        quantized=quantized,
        blocks_wait=waits,
        text_encoder_quantized=bool(cfg.model.quantize_text_encoder and "text_encoder" in comps.encoders),
        **_host_fields(cfg, comps, device, sub, catalogue_entry),
        load_phase_bytes=load_phase,
        mapped=mapped,
        heap_factor=CPU_HEAP_FACTOR[False] if glibc_heap else 1.0,
        heap_factor_checkpointed=CPU_HEAP_FACTOR[True] if glibc_heap else 1.0,
        nf4_model_savings=nf4_savings,
        nf4_text_encoder_savings=0 if cfg.model.quantize_text_encoder else te_savings,
        dequant_bytes=dequant,
        blocks_to_swap=swap["blocks_to_swap"],
        swapped_bytes=swap["swapped_bytes"],
        swap_in_flight_bytes=swap["swap_in_flight_bytes"],
    )
    if len(settings) == 1 and capacity is not None and plan.peak_memory_bytes > capacity:
        other, _, _ = traces((not checkpointing,), shares=False)
        plan.steps = sorted([*steps, *other], key=lambda step: step.checkpointing)  # as both_settings lists them
    return plan


def _cache_phase_weights(cfg: TrainConfig, spec, comps, weights: dict, swap: dict, where, read_share, sub):
    """The weights resident while the latents are cached: the base's share parked at load taken off, and on a CPU
    what is copied or mapped from the files; returns (bytes per component, the load phase's bytes, mapped)."""
    cache_weights, load_phase, mapped = dict(weights), None, list[str]()
    scale = weights["model"] / max(module_bytes(comps.model), 1)
    sizes = block_sizes(comps.model, spec.info.block_lists)
    cache_weights["model"] -= cache_parked(where, sizes, scale, swap["swapped_bytes"])  # parked at load
    if where.device == "cpu":  # on CUDA every weight is copied to the device: resident in full, no source pages
        modules = {"model": comps.model, **{k: m for k, m in comps.encoders.items() if isinstance(m, torch.nn.Module)}}
        copied = {"model"} if quantize.enabled(cfg.model) else set()
        copied |= {"text_encoder"} if cfg.model.quantize_text_encoder else set()
        cache_weights, load_phase, mapped = cpu_residency(cfg.model, modules, weights, read_share, sub, copied)
    return cache_weights, load_phase, mapped


def _host_fields(cfg: TrainConfig, comps, device: str, sub: str, catalogue_entry: str | None) -> dict[str, Any]:
    """On an accelerator, what :mod:`.host` needs: the components' stored bytes and those converted at load."""
    if device == "cpu":
        return {}
    modules = {"model": comps.model, **{k: m for k, m in comps.encoders.items() if isinstance(m, torch.nn.Module)}}
    entry = by_hub_id(catalogue_entry or str(cfg.model.pretrained_model_name_or_path or ""))
    stored, converted = resident.stored_bytes(cfg.model, modules, sub, entry.stored_dtype if entry else None)
    return {"host_stored": stored, "host_converted": converted}


def _trainable_fields(cfg: TrainConfig, model, device: str, num_processes: int, engine: str) -> dict[str, Any]:
    """The plan's fields that follow from the trained parameters: their count, Adam's moments, the finite guard's
    snapshot, the EMA copy and DDP's gradient buckets."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainable_bytes = sum(p.numel() * p.element_size() for p in trainable)
    numels = [p.numel() for p in trainable]
    if cfg.training.optimizer == "prodigy":  # exp_avg, exp_avg_sq, s and p0, fp32 (training/prodigy.py)
        moments = sum(16 * n for n in numels)
    elif cfg.training.optimizer == "adafactor":
        moments = adafactor_state_bytes([tuple(p.shape) for p in trainable], first_moment=cfg.training.adafactor_beta1)
    elif cfg.training.optimizer == "came":
        moments = came_state_bytes([tuple(p.shape) for p in trainable])
    elif cfg.training.optimizer in LOW_BIT_ADAM:
        moments = lowbit_adam_state_bytes(numels, bits=LOW_BIT_ADAM[cfg.training.optimizer])
    else:
        moments = adam_moment_bytes(numels, eight_bit=cfg.training.use_8bit_adam)
    return {
        "trainable_params": sum(p.numel() for p in trainable),
        "optimizer_bytes": moments,
        "snapshot_bytes": trainable_bytes + moments if cfg.guards.finite_guard else 0,
        "ema_bytes": _ema_bytes(cfg, trainable, device),
        "ema_host_bytes": _ema_bytes(cfg, trainable, "cpu")
        if device != "cpu" and cfg.training.ema_device == "cpu"
        else 0,
        "eight_bit_adam": cfg.training.use_8bit_adam,
        "optimizer": cfg.training.optimizer,
        "ddp_bytes": trainable_bytes if num_processes > 1 and engine == "ddp" else 0,
    }


def _family_lets_blocks_wait(spec: FamilySpec, cfg: TrainConfig) -> bool:
    """The family's say on whether its loader parks the blocks for the cache (its plan's ``blocks_wait_for_cache``;
    default yes: every loader that calls :func:`~dit_lora.modeling.cache_parking.park_for_load`)."""
    says = getattr(planner(spec), "blocks_wait_for_cache", None)
    return True if says is None else bool(says(cfg))


def _ema_bytes(cfg: TrainConfig, trainable: list, device: str) -> int:
    """``--use_ema``'s fp32 copy of the trainable weights (and, with the guard, its snapshot) where the device holds
    it: on the accelerator, or on a CPU run whatever --ema_device says (the host is the device)."""
    if not cfg.training.use_ema or (cfg.training.ema_device == "cpu" and device != "cpu"):
        return 0
    return 4 * sum(p.numel() for p in trainable) * (2 if cfg.guards.finite_guard else 1)


def adafactor_state_bytes(shapes: list[tuple[int, ...]], *, first_moment: float | None) -> int:
    """Adafactor's state for trainable tensors of ``shapes`` (training/adafactor.py), fp32: a matrix's second moments
    factored into a row and a column (a 1-D tensor keeps one per value), its step and RMS scalars, and with a
    ``first_moment`` decay (--adafactor_beta1) one value per weight."""
    total = 0
    for shape in shapes:
        numel = math.prod(shape)
        second = math.prod(shape[:-1]) + math.prod(shape[:-2] + shape[-1:]) if len(shape) >= 2 else numel
        total += 4 * second + 8 + 4 + (4 * numel if first_moment is not None else 0)
    return total


def came_state_bytes(shapes: list[tuple[int, ...]]) -> int:
    """CAME's state for trainable tensors of ``shapes`` (training/came.py), fp32: a first moment of each tensor's
    size; a matrix's second moments and its instabilities each factored into a row and a column (a 1-D tensor keeps
    a full second moment and no instability); a float64 step count."""
    total = 0
    for shape in shapes:
        numel = math.prod(shape)
        factored = math.prod(shape[:-1]) + math.prod(shape[:-2] + shape[-1:]) if len(shape) >= 2 else 0
        total += 4 * numel + (4 * 2 * factored if factored else 4 * numel) + 8
    return total


#: bitsandbytes' 8-bit optimizers keep a tensor's state in 32 bits below this many elements (``min_8bit_size``) ...
BNB_MIN_8BIT_SIZE = 4096
#: ... and above it one byte per element and moment plus an fp32 absmax per block of this many (``blocksize``)
BNB_BLOCKSIZE = 256


def adam_moment_bytes(numels: list[int], *, eight_bit: bool) -> int:
    """AdamW's two moments for trainable tensors of ``numels`` elements: fp32 (torch's AdamW), or with
    ``eight_bit`` as ``bitsandbytes.optim.AdamW8bit`` allocates them (``Optimizer2State.init_state``, bitsandbytes
    0.49-0.50): a uint8 state per moment and an fp32 absmax per 256 elements, fp32 states for a tensor under 4,096
    elements. A LoRA's A and B matrices are nearly all above it: about 2 bytes a parameter instead of 8."""
    if not eight_bit:
        return sum(8 * n for n in numels)
    total = 0
    for n in numels:
        if n < BNB_MIN_8BIT_SIZE:
            total += 8 * n
        else:
            total += 2 * (n + 4 * -(-n // BNB_BLOCKSIZE))
    return total


#: --optimizer's torchao AdamW choices (training/optim.py): bits per moment value
LOW_BIT_ADAM = {"adamw8bit": 8, "adamw4bit": 4}
#: torchao's low-bit moments: values per fp32 block scale (the optimizers' ``block_size``) and lookup-table entries
#: (``qmap``, fp32, one table per moment), by bits
TORCHAO_BLOCK = {8: 256, 4: 128}
TORCHAO_QMAP = {8: 256, 4: 16}
#: torchao quantizes a moment of at least this many values (and a whole number of blocks), as bitsandbytes does
TORCHAO_MIN_SIZE = 4096


def lowbit_adam_state_bytes(numels: list[int], *, bits: int, element_size: int = 4) -> int:
    """torchao's ``AdamW8bit`` (``bits`` 8) or ``AdamW4bit`` (4) state for trainable tensors of ``numels`` elements, as
    training/lowbit_adam.py keeps it (torchao 0.18's ``_new_buffer``): per tensor an fp32 step count and two moments,
    each ``bits`` per element (uint8 codes, two 4-bit codes a byte), an fp32 scale per block and its fp32 lookup table;
    a tensor under 4,096 elements, or not a whole number of blocks, keeps them unquantized in the parameter's dtype
    (``element_size`` bytes: fp32 masters). A LoRA's matrices: about 2 bytes a parameter (8-bit) or 1.06 (4-bit)
    instead of AdamW's 8."""
    block, table = TORCHAO_BLOCK[bits], TORCHAO_QMAP[bits]
    total = 0
    for n in numels:
        if n >= TORCHAO_MIN_SIZE and n % block == 0:
            total += 2 * (n * bits // 8 + 4 * (n // block) + 4 * table)
        else:
            total += 2 * element_size * n
        total += 4  # the step count
    return total
