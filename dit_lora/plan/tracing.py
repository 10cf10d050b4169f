"""The training step as the memory plan measures it: traced on fake tensors, extrapolated over the blocks.

The family builds its components from their configs on the meta device (:meth:`plan_components`),
the run's own :func:`~dit_lora.modeling.trainables.attach_trainables` adds LoRA, backbone groups, fp32
masters and checkpointing (:func:`build`), and one micro-batch per bucket goes through the family's own
``encode_images`` (the cache step) and ``compute_loss`` + backward on fake tensors (:func:`trace_step`), counted by
:class:`~dit_lora.plan.fake.LiveBytes` and ``torch.utils.flop_counter.FlopCounterMode``. :func:`traces` gives a
:class:`StepTrace` per bucket and checkpointing setting; :func:`tracer` takes them from :mod:`.trace_cache` when an
earlier plan of the same inputs kept them. :mod:`.estimate` adds what a process holds beside the step.

Repeated blocks are identical, so the step is traced at two and at three blocks (:data:`TRACE_DEPTHS`) and
extrapolated linearly to the model's depth: a 28-block trace costs what a 3-block one does, and activations,
gradients and FLOPs all grow by the same amount per block from the second block on. The first block is not
like the others: its input needs no gradient (the patch embedding before it is frozen), so its backward keeps
less; extrapolating from one and two blocks took that lighter block's growth for every block's and overstated
Wan's checkpointed step (1.3B at 81 x 480 x 832: 11.8 GiB against the full trace's 6.5, ``benchmarks/
wan/step_gpu.py``). Weights are counted at full depth from the meta modules (:mod:`.estimate`).

``--activation_offloading`` moves every tensor autograd saves for backward to host memory and brings it back for
backward; with ``--gradient_checkpointing`` those are the checkpointed blocks' inputs, so the device keeps the ones in
flight (the block being recomputed and the next one arriving) beside the recomputation's own peak. The trace at
:data:`TRACE_DEPTHS`' first depth holds exactly that many blocks' saved inputs and one recomputation, so its peak
is the step's activations with offloading (:attr:`StepTrace.offloaded_bytes`; a conservative figure: what layers
outside the blocks save is offloaded too in the run, and counted here). On a CPU the host is the device: no saving.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
from dataclasses import dataclass

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract import spec as fallback
from dit_lora.contract.capabilities import MemoryPlan
from dit_lora.contract.spec import FamilySpec
from dit_lora.modeling.trainables import attach_trainables
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

#: the depths a step is traced at before extrapolating (module docstring: the first block is lighter than the rest,
#: so the per-block growth is read between blocks two and three); a model this deep or shallower is traced whole
TRACE_DEPTHS = (2, 3)
#: --activation_offloading: checkpointed blocks' saved inputs on the device at once (the block recomputing in the
#: backward, whose input came back, and the next one prefetched); equals TRACE_DEPTHS[0], whose trace holds them
OFFLOAD_IN_FLIGHT = 2


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


def planner(spec: FamilySpec) -> MemoryPlan:
    """``spec.plan`` (:class:`~dit_lora.contract.capabilities.MemoryPlan`); a family without it is one paragraph
    (``dit-lora plan`` exits 2; a run goes on without a plan)."""
    return fallback.require(spec, "plan", "The memory plan (`dit-lora plan`, and the check at the start of a run)")


def trace_step(spec: FamilySpec, cfg: TrainConfig, comps, batch: dict, mode) -> tuple[int, int]:
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


def build(spec: FamilySpec, cfg: TrainConfig, read, depth: int | None, checkpointing: bool):
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


def builds(spec: FamilySpec, cfg: TrainConfig, read, depth: int, settings: tuple[bool, ...]):
    """``(checkpointing, components)`` at ``depth`` for each setting in ``settings`` (meta device), as
    :func:`build` makes them, from one build: the components are built once without checkpointing and copied
    for the setting that switches it on, which is all ``attach_trainables`` does differently. The copy is made
    before any trace, so a cache a step leaves (CogVideoX keeps its RoPE tables in ``comps.state``) is made and
    counted again in the other setting's trace, as in a build of its own; the frozen encoders are shared."""
    first, *rest = sorted(settings)  # without checkpointing first: a copy switches it on, never off
    comps, _ = build(spec, cfg, read, depth, first)
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


def traces(
    spec: FamilySpec, cfg: TrainConfig, read, full_depth: int, settings: tuple[bool, ...], *, shares: bool = True
) -> tuple[list[StepTrace], int, dict[str, float]]:
    """Step traces for every bucket and checkpointing setting in ``settings``, the peak of one encode call, and
    per component the fraction of its weight bytes that encode call read (``shares``; else none: only a CPU plan
    reads them, :func:`~dit_lora.plan.placement.cpu_residency`, and watching every operator's inputs costs the
    encode a tenth of its time).

    One fake mode serves every trace, so the batches (the family's encode of one micro-batch per bucket) are
    made once and reused; a model of at most :data:`TRACE_DEPTHS`' deepest is traced at its own depth.
    """
    depths = TRACE_DEPTHS if full_depth > TRACE_DEPTHS[-1] else (full_depth,)
    measured: dict[tuple[str, bool], list[tuple[int, int]]] = {}
    encode_peak, batches, read_share = 0, None, {}
    mode = fake_mode()  # entered per use: the meta modules are built outside it
    for depth in depths:
        faked: set[int] = set()  # the encoders shared between a depth's builds are made fake once
        for gc, comps in builds(spec, cfg, read, depth, settings):  # meta modules, outside the fake mode
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
                measured.setdefault((bucket, gc), []).append(trace_step(spec, cfg, comps, batch, mode))
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


def tracer(spec: FamilySpec, cfg: TrainConfig, read, full_depth: int, cache: bool):
    """``traces(settings, shares=...)``: :func:`_kept_traces` with ``cache`` (unless ``DIT_LORA_PLAN_CACHE=0``), else
    :func:`traces`."""
    return functools.partial(_kept_traces if cache and trace_cache.enabled() else traces, spec, cfg, read, full_depth)


def _kept_traces(
    spec: FamilySpec, cfg: TrainConfig, read, full_depth: int, settings: tuple[bool, ...], *, shares: bool = True
) -> tuple[list[StepTrace], int, dict[str, float]]:
    """:func:`traces`, taken from :mod:`.trace_cache` when an earlier plan of the same inputs kept them."""
    traced = {"depth": full_depth, "settings": list(settings), "shares": shares}
    name = trace_cache.key(spec.name, cfg, traced)
    kept = trace_cache.lookup(name, read, _decode_traces)
    if kept is not None:
        return kept
    reader = trace_cache.RecordingReader(read)
    steps, encode_peak, read_share = traces(spec, cfg, reader, full_depth, settings, shares=shares)
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
