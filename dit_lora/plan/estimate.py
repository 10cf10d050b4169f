"""Predict a run's peak memory and FLOPs per step without loading a weight: :func:`plan_run` gives the
:class:`Plan`.

The step is traced on fake tensors over the model's blocks (:mod:`.tracing`, which gives each bucket's
:class:`~dit_lora.plan.tracing.StepTrace`); the weights are counted at full depth from the meta modules, where they
are placed by :mod:`.placement` (a CPU's memory-mapped files, block swap, the cache's parking).

What a process holds at its peak:
- caching phase (diffusion with ``--cache_latents``): every component's weights plus one encode call;
- training phase: the trained model's weights (encoders released after caching), the optimizer's state (as the
  optimizer table counts it for the run's optimizer: :mod:`dit_lora.config.optimizers`), the guard's
  rollback snapshot (parameters and optimizer state), DDP's gradient buckets, and the
  step's activations and gradients (with ``--activation_offloading`` on an accelerator, the offloaded figure).
On a CPU, where a run reports its peak resident size, the Python process itself is added (measured here),
and weights count as resident as :func:`~dit_lora.plan.placement.cpu_residency` says (memory-mapped ones for what
is read, converted ones in full, with a loading phase). The training step's live bytes are multiplied by
:data:`CPU_HEAP_FACTOR` there: glibc's heap keeps a step's freed activations in pieces the next activation
does not fit, so a step's resident growth is a multiple of its live peak. (The no-grad encode of the caching
phase frees as it goes: applied to it, a factor of 2.2 over-predicted DiT's peaks by 44%.)

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

import dataclasses
import os
import platform
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from dit_lora.catalogue import by_hub_id, lookup
from dit_lora.config import TrainConfig, optimizers
from dit_lora.config.schema import GuardOptions, ModelOptions, TrainingOptions
from dit_lora.contract import spec as fallback
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.modeling import cache_parking, quantize
from dit_lora.output.report import load_pyplot
from dit_lora.plan import resident
from dit_lora.plan.fake import module_bytes
from dit_lora.plan.placement import block_sizes, cache_parked, cache_phase_weights, swap_figures
from dit_lora.plan.tracing import StepTrace, attach_on_meta, planner, tracer

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
    swap_in_flight_bytes: int = 0  #: the most of them on the device at once (:data:`~.placement.SWAP_IN_FLIGHT` blocks)
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
    optimizer: str = optimizers.DEFAULT  #: --optimizer (whose state optimizer_bytes counts)
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


def _check_engine(engine: str) -> None:
    if engine not in ("ddp", "fsdp2"):
        raise ValueError(f"engine must be 'ddp' or 'fsdp2', not {engine!r}")


def _depth(spec: FamilySpec, model: ModelOptions, read) -> tuple[int, str]:
    """The model's block count from its config (``spec.plan.depth_key``) and the trained model's subfolder; a config
    that cannot be read is one paragraph."""
    file, key = planner(spec).depth_key
    sub, _, name = file.rpartition("/")
    depth_config = read(sub, name)
    if depth_config is None:
        raise UserError(
            f"The memory plan needs `{file}` of --pretrained_model_name_or_path "
            f"`{model.pretrained_model_name_or_path}`, which is neither in that folder nor in the Hub cache, "
            "and the model is not in the catalogue (`dit-lora models`). Download the model's config "
            "files (a recipe run with --ignore_memory_plan starts without the plan)."
        )
    return int(lookup(depth_config, key)), sub


def _weights(
    model: ModelOptions, dtype: torch.dtype, comps, quantizable: list[str]
) -> tuple[dict[str, int], int, int, int]:
    """Each component's bytes as loaded (``--quantize_base``'s linears ``quantizable`` and ``--quantize_text_encoder``'s
    at their quantized size), the largest weight dequantized while it runs, and the bytes nf4 would save on the text
    encoder and on the model (0 where already quantized)."""
    weights, dequant = {"model": module_bytes(comps.model)}, 0
    if quantize.enabled(model):  # the linears the library quantizes, at their quantized size; the rest as loaded
        weights["model"] -= quantize.quantized_weight_savings(comps.model, model.quantize_base, quantizable)
        dequant = quantize.dequantized_peak_bytes(comps.model, model.quantize_base, quantizable, dtype)
    weights.update({k: module_bytes(m) for k, m in comps.encoders.items() if isinstance(m, torch.nn.Module)})
    text_encoder = comps.encoders.get("text_encoder")
    te_savings = (
        0
        if text_encoder is None
        else quantize.quantized_weight_savings(  # transformers' nf4 (its
            text_encoder, "nf4", quantize.quantized_linears(text_encoder)
        )
    )  # _keep_in_fp32_modules not)
    if model.quantize_text_encoder:
        weights["text_encoder"] -= te_savings
    nf4_savings = (
        0
        if quantize.enabled(model)
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
    full_depth, sub = _depth(spec, cfg.model, read)
    comps = planner(spec).plan_components(cfg, read)  # full depth, meta: weights by dtype
    checkpointing = attach_on_meta(comps.model, spec, cfg).checkpointing
    quantizable = quantize.quantized_linears(comps.model, fallback.quantize_skip_modules(spec))
    weights, dequant, te_savings, nf4_savings = _weights(cfg.model, cfg.weight_dtype, comps, quantizable)
    swap = swap_figures(cfg.performance, spec, comps.model, device, weights["model"])
    cached = bool(comps.encoders) and cfg.data.cache_latents
    settings = (False, True) if both_settings else (checkpointing,)
    traces = tracer(spec, cfg, read, full_depth, cache)
    steps, encode_peak, read_share = traces(settings, shares=device == "cpu")
    quantized = cfg.model.quantize_base if quantize.enabled(cfg.model) else None
    # the base's say is cache_parked's (a lever may change the base): here the run's and the family's
    waits = cached and cache_parking.run_caches(cfg.data) and _family_lets_blocks_wait(spec, cfg)
    where = types.SimpleNamespace(device=device, engine=engine, blocks_wait=waits, quantized=quantized)
    cache_bytes, load_phase, mapped = cache_phase_weights(cfg.model, spec, comps, weights, swap, where, read_share, sub)
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
        **_trainable_fields(cfg.training, cfg.guards, comps.model, device, num_processes, engine),
        cache_phase_bytes=sum(cache_bytes.values()) + encode_peak if cached else None,
        encoders_in_training=bool(comps.encoders) and not cfg.data.cache_latents,
        process_bytes=process_resident_bytes() if device == "cpu" else 0,
        checkpointing=checkpointing,
        steps=steps,
        quantized=quantized,
        blocks_wait=waits,
        text_encoder_quantized=bool(cfg.model.quantize_text_encoder and "text_encoder" in comps.encoders),
        **_host_fields(cfg.model, comps, device, sub, catalogue_entry),
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


def _host_fields(model: ModelOptions, comps, device: str, sub: str, catalogue_entry: str | None) -> dict[str, Any]:
    """On an accelerator, what :mod:`.host` needs: the components' stored bytes and those converted at load."""
    if device == "cpu":
        return {}
    modules = {"model": comps.model, **{k: m for k, m in comps.encoders.items() if isinstance(m, torch.nn.Module)}}
    entry = by_hub_id(catalogue_entry or str(model.pretrained_model_name_or_path or ""))
    stored, converted = resident.stored_bytes(model, modules, sub, entry.stored_dtype if entry else None)
    return {"host_stored": stored, "host_converted": converted}


def _trainable_fields(
    training: TrainingOptions, guards: GuardOptions, model, device: str, num_processes: int, engine: str
) -> dict[str, Any]:
    """The plan's fields that follow from the trained parameters: their count, the optimizer's state, the finite
    guard's snapshot, the EMA copy and DDP's gradient buckets."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainable_bytes = sum(p.numel() * p.element_size() for p in trainable)
    # the state of the optimizer the run builds (the optimizer table's count: dit_lora/config/optimizer_state.py)
    chosen = optimizers.chosen(training.optimizer, training.use_8bit_adam)
    moments = chosen.state_bytes([tuple(p.shape) for p in trainable], training)
    return {
        "trainable_params": sum(p.numel() for p in trainable),
        "optimizer_bytes": moments,
        "snapshot_bytes": trainable_bytes + moments if guards.finite_guard else 0,
        "ema_bytes": _ema_bytes(training, guards, trainable, device),
        "ema_host_bytes": _ema_bytes(training, guards, trainable, "cpu")
        if device != "cpu" and training.ema_device == "cpu"
        else 0,
        "eight_bit_adam": training.use_8bit_adam,
        "optimizer": training.optimizer,
        "ddp_bytes": trainable_bytes if num_processes > 1 and engine == "ddp" else 0,
    }


def _family_lets_blocks_wait(spec: FamilySpec, cfg: TrainConfig) -> bool:
    """The family's say on whether its loader parks the blocks for the cache (its plan's ``blocks_wait_for_cache``;
    default yes: every loader that calls :func:`~dit_lora.modeling.cache_parking.park_for_load`)."""
    says = getattr(planner(spec), "blocks_wait_for_cache", None)
    return True if says is None else bool(says(cfg))


def _ema_bytes(training: TrainingOptions, guards: GuardOptions, trainable: list, device: str) -> int:
    """``--use_ema``'s fp32 copy of the trainable weights (and, with the guard, its snapshot) where the device holds
    it: on the accelerator, or on a CPU run whatever --ema_device says (the host is the device)."""
    if not training.use_ema or (training.ema_device == "cpu" and device != "cpu"):
        return 0
    return 4 * sum(p.numel() for p in trainable) * (2 if guards.finite_guard else 1)
