"""The plan as people read it: a table, what fits on the given memory, and the recipes' start-of-run gate."""

from __future__ import annotations

import os
import re

import torch

from dit_lora.config import optimizers
from dit_lora.core.errors import UserError
from dit_lora.plan import host, ladder
from dit_lora.plan.estimate import Plan

GIB = 2**30


def parse_memory(text: str) -> int:
    """``24GB``, ``24GiB``, ``80G``, ``24000MB`` -> bytes. GB and GiB both mean 2**30 (cards are sold in GiB)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise UserError(f"--gpu_memory `{text}` is not a size. Write it as e.g. 24GB, 80GiB or 16000MB.")
    scale = {"": GIB, "K": 2**10, "M": 2**20, "G": GIB, "T": 2**40}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def device_memory(device: torch.device) -> int:
    """Total memory of ``device``: the GPU's, or the machine's RAM for a CPU."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def device_name(device: torch.device) -> str:
    """The device as a run's messages name it: the GPU's model (``NVIDIA H100 80GB HBM3, cuda:0``), or the CPU."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"this {torch.cuda.get_device_name(index)} (cuda:{index})"
    return f"this {device.type} device"


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.2f} GiB"


def _quantized_label(plan: Plan, name: str) -> str:
    """`` (Linear weights nf4-quantized)`` on the rows --quantize_base / --quantize_text_encoder shrink."""
    if name == plan.trained_component and plan.quantized:
        return f" (Linear weights {plan.quantized}-quantized)"
    if name == "text_encoder" and plan.text_encoder_quantized:
        return " (Linear weights nf4-quantized)"
    return ""


def _host_rows(plan: Plan) -> list[tuple[str, str]]:
    """On an accelerator, the host memory (plan/host.py) a process needs, by phase."""
    return [
        ("host: model files mapped while loading (pages the system can drop)", _gib(host.mapped_bytes(plan))),
        ("host: copies made while loading (converted weights, fp8 model)", _gib(host.copied_bytes(plan))),
        ("host: pinned while training (swapped blocks, offloaded tensors, EMA)", _gib(host.training_bytes(plan))),
        ("host memory (RAM) at its peak, with the process itself", host.summary(plan)),
    ]


def format_plan(plan: Plan, capacity: int | None = None, card: str | None = None) -> str:
    """The prediction as a table, then what fits on ``capacity`` bytes (when given; ``card``: where that figure
    came from, e.g. ``--gpu_memory 24GB``, said with the margin the plan keeps of it)."""
    head = (
        f"memory plan for `{plan.model}` ({plan.family}"
        + (f", catalogued as {plan.catalogue_entry}" if plan.catalogue_entry else "")
        + f"), {plan.num_processes} process(es) on {plan.device}, batch {plan.train_batch_size} "
        f"x accumulation {plan.gradient_accumulation_steps}, {plan.depth} blocks (predicted, no weights loaded)"
    )
    rows = [(f"weights: {name}" + _quantized_label(plan, name), _gib(size)) for name, size in plan.weights.items()]
    if plan.blocks_to_swap:
        rows.append((f"block swap (--blocks_to_swap {plan.blocks_to_swap})", _swap_row(plan)))
    rows += [
        ("trainable parameters", f"{plan.trainable_params:,} (fp32)"),
        (
            f"optimizer moments ({_optimizer_label(plan)})",
            _gib(plan.optimizer_bytes),
        ),
        ("rollback snapshot (guard)", _gib(plan.snapshot_bytes)),
    ]
    if plan.ddp_bytes:
        rows.append(("DDP gradient buckets", _gib(plan.ddp_bytes)))
    if plan.ema_bytes:
        rows.append(("EMA of the trainable weights (--use_ema, fp32, and its snapshot)", _gib(plan.ema_bytes)))
    if plan.dequant_bytes:
        rows.append(("fp8 weight dequantized while its layer runs (largest)", _gib(plan.dequant_bytes)))
    if plan.shards > 1:
        rows.append((f"FSDP2: trained model on one of {plan.shards} ranks", _gib(plan.model_on_device())))
    if plan.offloaded_host_bytes():
        rows.append(("activation offloading: saved tensors in pinned host memory", _gib(plan.offloaded_host_bytes())))
    for step in plan.steps:
        gc = "with" if step.checkpointing else "without"
        rows.append((f"step activations, {step.bucket}, {gc} checkpointing", _gib(plan.step_bytes(step))))
    if (plan.heap_factor, plan.heap_factor_checkpointed) != (1.0, 1.0):
        rows.append(
            (
                "training step: resident per live byte (glibc heap)",
                f"x{plan.heap_factor:g} (x{plan.heap_factor_checkpointed:g} with checkpointing)",
            )
        )
    if plan.process_bytes:
        rows.append(("Python process (measured here)", _gib(plan.process_bytes)))
    if plan.load_phase_bytes:
        rows.append(("loading phase (weights converted at load + one source)", _gib(plan.load_phase_bytes)))
    cache_label = (
        "caching phase (what the encode reads of mapped weights + one encode)"
        if plan.mapped
        else "caching phase (every component + one encode)"
    )
    rows += [
        (cache_label, _gib(plan.cache_phase_bytes)),
        ("training phase", _gib(plan.train_phase_bytes())),
    ]
    if plan.ddp_start_bytes():
        rows.append(("DDP's wrap (weights + one broadcast bucket)", _gib(plan.ddp_start_bytes())))
    rows += [
        ("predicted peak per process", _gib(plan.peak_memory_bytes)),
        ("FLOPs per optimizer update (forward + backward)", f"{plan.flops_per_update() / 1e12:.2f} TFLOP"),
    ]
    if plan.device != "cpu":
        rows += _host_rows(plan)
    width = max(len(k) for k, _ in rows)
    lines = [head] + [f"  {k:<{width}}  {v}" for k, v in rows]
    if capacity is not None and card is not None:
        lines.append(margin_line(capacity, card))
    if capacity is not None and plan.peak_memory_bytes > capacity:
        lines.append(f"does not fit: the predicted peak {_gib(plan.peak_memory_bytes)} exceeds {_gib(capacity)}.")
        lines.append(ladder.format_ladder(ladder.climb(plan, capacity)))
    elif capacity is not None:
        lines.append(advice(plan, capacity))
    return "\n".join(lines)


def _swap_row(plan: Plan) -> str:
    """What --blocks_to_swap changes in the trained model's resident weights, and why."""
    in_flight = _gib(plan.swap_in_flight_bytes)
    if plan.device == "cpu":
        return f"+{in_flight} (host memory is the device's here: only the copies of the blocks in flight add)"
    return (
        f"-{_gib(plan.swap_saving)} on the device ({_gib(plan.swapped_bytes)} of frozen weights in pinned host memory, "
        f"{in_flight} of them in flight)"
    )


def margin_line(capacity: int, card: str) -> str:
    """What the plan keeps free of the ``capacity`` bytes of ``card`` (the flag that gave it, or the device's name)."""
    return (
        f"card: {_gib(capacity)} ({card}); the plan keeps {ladder.GPU_ERROR:.0%} of it free, its worst error measured "
        f"on a GPU (benchmarks/RESULTS.md), so a prediction fits at {_gib(ladder.room(capacity))} or less"
    )


def advice(plan: Plan, capacity: int) -> str:
    """One paragraph: whether the run fits on ``capacity`` bytes with the plan's error kept free, narrowly (with the
    ladder's flags that keep it), or not, with the ladder's answer (:func:`~dit_lora.plan.ladder.climb`): the fastest
    configuration the plan knows that fits, as flags to copy."""
    peak = plan.peak_memory_bytes
    if peak <= ladder.room(capacity):
        return (
            f"fits: {_gib(peak)} of {_gib(capacity)} ({_gib(capacity - peak)} to spare, the plan's "
            f"{ladder.GPU_ERROR:.0%} error kept free)."
        )
    if peak <= capacity:
        # what keeps the margin: the ladder's answer (it lowers the phase that sets the peak, the caching phase
        # included, not a fixed guess)
        found = ladder.climb(plan, capacity)
        hint = (
            f"the flags that keep it free: {' '.join(found.launch_flags() + found.flags())} (predicted "
            f"{_gib(found.recommended.peak_memory_bytes)})"
            if found.chosen is not None and found.flags()
            else "no lever the plan knows keeps it free"
        )
        return f"{ladder.narrowly(peak, capacity)}; {hint}."
    found = ladder.climb(plan, capacity)
    text = f"does not fit: the predicted peak {_gib(peak)} exceeds {_gib(capacity)}. The ladder's answer: "
    return text + ladder.answer(found) + "."


def check_fits(plan: Plan, capacity: int, where: str) -> str | None:
    """The start-of-run gate, before a run loads a model: stop it when the prediction exceeds the ``capacity`` bytes
    of ``where``; return the warning to log when it fits only inside the plan's error (None when it fits with it)."""
    if plan.peak_memory_bytes <= ladder.room(capacity):
        return None
    if plan.peak_memory_bytes <= capacity:
        return (
            f"memory plan on {where}: " + advice(plan, capacity) + " `dit-lora plan` with the same options shows the "
            "whole prediction and the ladder."
        )
    raise UserError(
        f"This run would not fit on {where}: "
        + advice(plan, capacity).removeprefix("does not fit: ")
        + " `dit-lora plan` with the same options shows the whole prediction and every rung of the ladder; "
        "--ignore_memory_plan starts the run anyway."
    )


def _optimizer_label(plan: Plan) -> str:
    """What the plan's optimizer state is, for its row: which optimizer, and in what precision (the table's label)."""
    return optimizers.chosen(plan.optimizer, plan.eight_bit_adam).plan_label
