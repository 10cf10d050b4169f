"""The plan as people read it: a table, what fits on the given memory, and the recipes' start-of-run gate."""

from __future__ import annotations

import os
import re

import torch

from dit_lora.core.errors import UserError
from dit_lora.plan.estimate import Plan

GIB = 2**30
#: a run stops at start only when the prediction exceeds the device's memory by more than this fraction
#: (the prediction leaves out allocator fragmentation and the CUDA context, and may be off either way)
MARGIN = 0.10
#: how far below the measured peak the plan has come out on a GPU (benchmarks/plan/vs_gpu.py: 4-16%, once 31%)
UNDER_PREDICTION = 0.15


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


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.2f} GiB"


def _quantized_label(plan: Plan, name: str) -> str:
    """`` (Linear weights nf4-quantized)`` on the rows --quantize_base / --quantize_text_encoder shrink."""
    if name == plan.trained_component and plan.quantized:
        return f" (Linear weights {plan.quantized}-quantized)"
    if name == "text_encoder" and plan.text_encoder_quantized:
        return " (Linear weights nf4-quantized)"
    return ""


def format_plan(plan: Plan, capacity: int | None = None) -> str:
    """The prediction as a table, then what fits on ``capacity`` bytes (when given)."""
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
        ("optimizer moments (AdamW, fp32)", _gib(plan.optimizer_bytes)),
        ("rollback snapshot (guard)", _gib(plan.snapshot_bytes)),
    ]
    if plan.ddp_bytes:
        rows.append(("DDP gradient buckets", _gib(plan.ddp_bytes)))
    if plan.dequant_bytes:
        rows.append(("fp8 weight dequantized while its layer runs (largest)", _gib(plan.dequant_bytes)))
    for step in plan.steps:
        gc = "with" if step.checkpointing else "without"
        rows.append((f"step activations, {step.bucket}, {gc} checkpointing", _gib(step.activation_bytes)))
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
        ("predicted peak per process", _gib(plan.peak_memory_bytes)),
        ("FLOPs per optimizer update (forward + backward)", f"{plan.flops_per_update() / 1e12:.2f} TFLOP"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [head] + [f"  {k:<{width}}  {v}" for k, v in rows]
    if capacity is not None:
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


def advice(plan: Plan, capacity: int) -> str:
    """One paragraph: whether the run fits on ``capacity`` bytes, and if not, the smallest change that does."""
    peak = plan.peak_memory_bytes
    if peak * (1 + UNDER_PREDICTION) <= capacity:
        return f"fits: {_gib(peak)} of {_gib(capacity)} ({_gib(capacity - peak)} to spare)."
    if peak <= capacity:
        return (
            f"fits, narrowly: {_gib(peak)} of {_gib(capacity)}. On an H100 the plan came out up to "
            f"{UNDER_PREDICTION:.0%} below the measured peak (benchmarks/RESULTS.md), so leave that headroom: "
            "--gradient_checkpointing or a smaller --train_batch_size if the run runs out of memory."
        )
    options = []
    traced_with = any(s.checkpointing for s in plan.steps)
    if not plan.checkpointing and traced_with and plan.peak_bytes(True) <= capacity:
        options.append(
            f"--gradient_checkpointing true (peak {_gib(plan.peak_bytes(True))}, about "
            f"{_step_cost(plan):.0%} more compute per step)"
        )
    smaller = _batch_that_fits(plan, capacity)
    if smaller:
        options.append(
            f"--train_batch_size {smaller} with --gradient_accumulation_steps "
            f"{plan.gradient_accumulation_steps * plan.train_batch_size // smaller} (the same samples per "
            "update)"
        )
    if plan.cache_phase_bytes and plan.cache_phase_bytes + plan.process_bytes > capacity:
        options.append(
            "building the latent cache needs the encoders beside the model: build it once on "
            "a larger device (the same --cache_dir is reused)"
        )
    gc = plan.checkpointing or traced_with  # the lighter setting, where it was traced
    quantized = bool(plan.nf4_model_savings) and not plan.quantized
    if quantized:
        options.append(_nf4_option(plan, gc, capacity))
    resolved = (
        bool(smaller)
        or (gc and not plan.checkpointing and plan.peak_bytes(True) <= capacity)
        or (quantized and _peak_with(plan, gc, nf4=True) <= capacity)
    )
    fewer = None if resolved else _fewer_tokens(plan, gc, quantized, capacity)
    if fewer or not options:  # no setting above fits alone: how far the tokens per step must come down
        options.append(fewer or _FEWER_TOKENS)
    return (
        f"does not fit: the predicted peak {_gib(peak)} exceeds {_gib(capacity)}. Options: " + "; ".join(options) + "."
    )


def _phases(plan: Plan, checkpointing: bool, nf4: bool) -> tuple[int, int]:
    """(training phase, the other phases' peak) at ``checkpointing``, with (``nf4``) the model's and the text
    encoder's Linear weights nf4-quantized; the process itself added to both. bitsandbytes' weights cannot be
    swapped, so nf4 comes without --blocks_to_swap: what the swap took off comes back first."""
    model = plan.nf4_model_savings if nf4 else 0
    text = plan.nf4_text_encoder_savings if nf4 else 0
    unswapped = plan.swap_saving if nf4 else 0
    parked = (0 if plan.device == "cpu" else plan.swapped_bytes) if nf4 else 0  # the caching phase's share
    train = plan.train_phase_bytes(checkpointing) + unswapped - model - (text if plan.encoders_in_training else 0)
    cache = plan.cache_phase_bytes + parked - model - text if plan.cache_phase_bytes else 0
    return train + plan.process_bytes, max(cache, plan.load_phase_bytes or 0) + plan.process_bytes


def _peak_with(plan: Plan, checkpointing: bool, nf4: bool) -> int:
    return max(_phases(plan, checkpointing, nf4))


def _nf4_option(plan: Plan, checkpointing: bool, capacity: int) -> str:
    """``--quantize_base nf4`` (and the text encoder's nf4 when it has one), with the peak that gives."""
    flags = "--quantize_base nf4" + (" --quantize_text_encoder true" if plan.nf4_text_encoder_savings else "")
    flags += " --blocks_to_swap 0" if plan.blocks_to_swap else ""  # they do not combine
    if checkpointing and not plan.checkpointing:
        flags += " --gradient_checkpointing true"
    after = _peak_with(plan, checkpointing, nf4=True)
    saved = _gib(plan.nf4_model_savings + plan.nf4_text_encoder_savings)
    return f"{flags} (frozen Linear weights in 4 bits, {saved} less: peak {_gib(after)}" + (
        ")" if after <= capacity else ", not enough alone)"
    )


_FEWER_TOKENS = (
    "a lower --resolution (or --height/--width/--max_num_frames for video): activations grow with the token count"
)


def _fewer_tokens(plan: Plan, checkpointing: bool, nf4: bool, capacity: int) -> str | None:
    """A lower size, with the share of the largest bucket's tokens whose training step fits beside everything else
    (activations grow about linearly with the tokens: fused attention keeps no token x token matrix); None when
    the training step fits as it is (another phase sets the peak)."""
    activations = plan.resident_activations(checkpointing)
    train, _ = _phases(plan, checkpointing, nf4)
    held = train - activations
    if train <= capacity:
        return None
    if activations <= 0 or held >= capacity:
        return _FEWER_TOKENS  # nothing is left for activations at any size
    settings = " with the settings above" if nf4 or (checkpointing and not plan.checkpointing) else ""
    share = (capacity - held) / activations
    return f"{_FEWER_TOKENS} (about {share:.0%} of the largest bucket's tokens fits{settings})"


def _step_cost(plan: Plan) -> float:
    with_gc = max(s.flops for s in plan.steps if s.checkpointing)
    without = max(s.flops for s in plan.steps if not s.checkpointing)
    return with_gc / without - 1 if without else 0.0


def _batch_that_fits(plan: Plan, capacity: int) -> int | None:
    """The largest smaller batch whose training phase fits (activations scale with the batch)."""
    batch = plan.train_batch_size
    if batch <= 1:
        return None
    activations = plan.resident_activations()
    held = plan.train_phase_bytes() - activations + plan.process_bytes
    for smaller in range(batch - 1, 0, -1):
        if held + activations * smaller // batch <= capacity and batch % smaller == 0:
            return smaller
    return None


def check_fits(plan: Plan, capacity: int, where: str) -> None:
    """Stop a run before it loads a model when the prediction exceeds ``capacity`` by more than :data:`MARGIN`."""
    if plan.peak_memory_bytes <= capacity * (1 + MARGIN):
        return
    raise UserError(
        f"This run would not fit on {where}: "
        + advice(plan, capacity).removeprefix("does not fit: ")
        + " `dit-lora plan` with the same options shows the whole prediction; --ignore_memory_plan starts the "
        "run anyway."
    )
