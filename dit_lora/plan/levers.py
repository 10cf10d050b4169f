"""A plan as it would read with one lever changed, without tracing again.

Each function takes a :class:`~dit_lora.plan.estimate.Plan` and returns a new one whose figures are those
:func:`~dit_lora.plan.estimate.plan_run` gives for the same configuration with that lever set: a weight lever
(``--quantize_base``, ``--blocks_to_swap``, the engine) changes only the weights' bytes, which the plan records per
scheme and per block (``quantize_savings``, ``block_sizes``), and the step's traces do not depend on it; a step
lever (checkpointing, activation offloading) picks another of the traces the plan already holds. Fewer tokens and a
smaller micro-batch scale the step's activations and FLOPs linearly (fused attention keeps no token x token
matrix), an approximation the ladder says it makes.

On an accelerator the derived plan equals a fresh one (``tests/plan/test_levers.py`` checks it); on a CPU the
residency of memory-mapped weights (``plan.mapped``) is left as the plan found it.
"""

from __future__ import annotations

import dataclasses
import re

from dit_lora.data.frames import frame_rule, latent_frames
from dit_lora.modeling import quantize
from dit_lora.plan.estimate import Plan
from dit_lora.plan.placement import swap_fields
from dit_lora.plan.tracing import StepTrace

#: image sizes come down in steps of this many pixels (a multiple of every family's VAE x patch size)
SIZE_STEP = 64
#: the smallest side or frame count the ladder proposes: below these a run trains on little of the data's content
MIN_SIDE, MIN_FRAMES = 256, 5
#: --quantize_base schemes bitsandbytes or torchao load: block swap cannot park their weights, FSDP2 cannot shard them
LIBRARY_QUANTIZED = ("nf4", "int8", "fp8")


def only_runnable(plan: Plan) -> Plan:
    """``plan`` with the quantization levers that do not run on its device (this machine's) taken out of the
    ladder's reach: a flag the run would refuse, or nf4 where ``doctor`` warns it rounds wrongly, is no advice. The
    others' savings are dropped, the plan's own scheme kept (the levers undo it by its savings)."""
    runnable = quantize.runnable_schemes(plan.device)
    savings = {s: saved for s, saved in plan.quantize_savings.items() if s in runnable or s == plan.quantized}
    nf4 = "nf4" in runnable  # --quantize_text_encoder is bitsandbytes' nf4 too
    return dataclasses.replace(
        plan,
        quantize_savings=savings,
        nf4_text_encoder_savings=plan.nf4_text_encoder_savings if nf4 else 0,
        nf4_model_savings=plan.nf4_model_savings if nf4 else 0,
    )


def _model_bytes(plan: Plan) -> int:
    return plan.weights[plan.trained_component]


def with_checkpointing(plan: Plan) -> Plan | None:
    """``--gradient_checkpointing true`` (None: already on, or the plan holds no checkpointed trace)."""
    if plan.checkpointing or not any(s.checkpointing for s in plan.steps):
        return None
    return dataclasses.replace(plan, checkpointing=True)


def with_batch(plan: Plan, batch: int) -> Plan:
    """``--train_batch_size batch`` with the accumulation that keeps the samples per update (activations and FLOPs
    per micro-batch scale with it)."""
    share = batch / plan.train_batch_size
    accumulation = plan.gradient_accumulation_steps * plan.train_batch_size // batch
    return dataclasses.replace(
        plan,
        train_batch_size=batch,
        gradient_accumulation_steps=accumulation,
        steps=[_scaled(s, share, s.bucket) for s in plan.steps],
    )


def _recached(before: Plan, after: Plan) -> Plan:
    """``after`` with the caching phase ``before``'s changed by what the levers between them changed there: the
    weights' bytes, and the trained model's bytes parked in host memory while the cache is built
    (:meth:`~dit_lora.plan.estimate.Plan.cache_parked_bytes`: the swapped blocks, or every block)."""
    if before.cache_phase_bytes is None:
        return after
    weights = sum(after.weights.values()) - sum(before.weights.values())
    parked = after.cache_parked_bytes() - before.cache_parked_bytes()
    return dataclasses.replace(after, cache_phase_bytes=before.cache_phase_bytes + weights - parked)


def with_swap(plan: Plan, count: int) -> Plan:
    """``--blocks_to_swap count`` (0: none); on an accelerator the caching phase holds the swapped blocks parked
    (all blocks, when they wait for the cache anyway)."""
    fields = swap_fields(plan.block_sizes, count, plan.device, _model_bytes(plan) / max(plan.model_built_bytes, 1))
    swapped = dataclasses.replace(
        plan,
        blocks_to_swap=fields["blocks_to_swap"],
        swapped_bytes=fields["swapped_bytes"],
        swap_in_flight_bytes=fields["swap_in_flight_bytes"],
    )
    return _recached(plan, swapped)


def with_quantization(plan: Plan, scheme: str, text_encoder: bool = False) -> Plan:
    """``--quantize_base scheme`` in place of the plan's (``text_encoder``: ``--quantize_text_encoder true`` too);
    the swapped blocks shrink with the model."""
    model = _model_bytes(plan) + (plan.quantize_savings.get(plan.quantized, 0) if plan.quantized else 0)
    weights = {**plan.weights, plan.trained_component: model - plan.quantize_savings.get(scheme, 0)}
    if text_encoder and "text_encoder" in weights and not plan.text_encoder_quantized:
        plan = with_text_encoder_nf4(plan)
        weights["text_encoder"] = plan.weights["text_encoder"]
    te_done = plan.text_encoder_quantized
    changed = dataclasses.replace(
        plan,
        weights=weights,
        quantized=scheme,
        text_encoder_quantized=te_done,
        dequant_bytes=plan.fp8_dequant_bytes if scheme == "fp8_scaled" else 0,
        nf4_model_savings=0,
    )
    changed = _recached(plan, changed)  # the weights at their new size, the parked blocks too
    return with_swap(changed, plan.blocks_to_swap)  # the same blocks at the new size


def with_text_encoder_nf4(plan: Plan) -> Plan:
    """``--quantize_text_encoder true``: the text encoder's Linear weights at nf4 size (bitsandbytes)."""
    weights = {**plan.weights, "text_encoder": plan.weights["text_encoder"] - plan.nf4_text_encoder_savings}
    cache = None if plan.cache_phase_bytes is None else plan.cache_phase_bytes - plan.nf4_text_encoder_savings
    return dataclasses.replace(
        plan, weights=weights, text_encoder_quantized=True, nf4_text_encoder_savings=0, cache_phase_bytes=cache
    )


def with_offloading(plan: Plan) -> Plan | None:
    """``--activation_offloading true`` (None: already on, on a CPU, or no trace tells a block's share)."""
    gains = any(s.offloaded_bytes is not None and s.offloaded_bytes < s.activation_bytes for s in plan.steps)
    if plan.activation_offloading or plan.device == "cpu" or not gains:
        return None
    return dataclasses.replace(plan, activation_offloading=True)


def with_fsdp2(plan: Plan) -> Plan | None:
    """The FSDP2 engine over the plan's processes (None: one process, already FSDP2, or a library-quantized base,
    which FSDP2 cannot shard); block swap does not combine with it and is dropped."""
    if plan.num_processes <= 1 or plan.engine == "fsdp2" or plan.quantized in LIBRARY_QUANTIZED:
        return None
    unswapped = with_swap(plan, 0)
    # every block waits in host memory until it is sharded: the caching phase holds none
    return _recached(unswapped, dataclasses.replace(unswapped, engine="fsdp2", ddp_bytes=0))


def _scaled(step: StepTrace, share: float, bucket: str) -> StepTrace:
    offloaded = None if step.offloaded_bytes is None else int(step.offloaded_bytes * share)
    return StepTrace(bucket, step.checkpointing, int(step.activation_bytes * share), int(step.flops * share), offloaded)


def largest_bucket(plan: Plan) -> str:
    """The bucket whose step sets the peak (the last traced when all are equal)."""
    return max(plan.steps, key=lambda s: s.activation_bytes).bucket


def with_tokens(plan: Plan, share: float, bucket: str) -> Plan:
    """The largest bucket cut to ``bucket``, ``share`` of its tokens: its activations and FLOPs scaled by that, and
    the caching phase's encode call (one micro-batch of the largest bucket, as the plan traces it)."""
    largest = largest_bucket(plan)
    steps = [_scaled(s, share, bucket) if s.bucket == largest else s for s in plan.steps]
    cache, encode = plan.cache_phase_bytes, int(plan.encode_peak_bytes * share)
    if cache is not None:  # the encode of one micro-batch of the cut bucket
        cache -= plan.encode_peak_bytes - encode
    return dataclasses.replace(plan, steps=steps, cache_phase_bytes=cache, encode_peak_bytes=encode)


def token_cuts(bucket: str, fixed: bool = False) -> list[tuple[float, str, list[str]]]:
    """Smaller sizes of ``bucket`` (``F x H x W`` for video, ``W x H px`` for images), largest first, each as (share
    of the tokens, the new bucket, the flags that ask for it): video loses frames first, in the ``4k + 1`` rule
    (the share is the latent frames'); images come down :data:`SIZE_STEP` pixels a side at the same aspect, in the
    options an image family takes: the ``--resolution`` square (the largest ``auto`` or ``square`` bucket is that
    square), or, for a run of one fixed size (``fixed``; any size not square is one), ``--aspect_buckets WxH``."""
    video = re.fullmatch(r"(\d+) x (\d+) x (\d+)", bucket)
    if video:
        frames, height, width = map(int, video.groups())
        cuts, n = [], frame_rule(frames - 1)
        while n >= MIN_FRAMES:
            share = latent_frames(n) / latent_frames(frames)
            cuts.append((share, f"{n} x {height} x {width}", ["--max_num_frames", str(n)]))
            n = frame_rule(n - 1)
        return cuts
    image = re.fullmatch(r"(\d+) x (\d+) px", bucket)
    if not image:
        return []
    width, height = map(int, image.groups())
    cuts = []
    top = (height - 1) // SIZE_STEP * SIZE_STEP  # the largest multiple of the step below the bucket's height
    for h in range(top, MIN_SIDE - 1, -SIZE_STEP):
        w = h if width == height else max(SIZE_STEP, round(width * h / height / SIZE_STEP) * SIZE_STEP)
        flags = ["--resolution", str(h)] if w == h and not fixed else ["--aspect_buckets", f"{w}x{h}"]
        cuts.append((h * w / (height * width), f"{w} x {h} px", flags))
    return cuts


def flags_between(before: Plan, after: Plan) -> list[str]:
    """The recipe flags that turn the configuration of ``before`` into that of ``after`` (the engine is a launch
    option: :func:`launch_flags`)."""
    flags: list[str] = []
    if after.checkpointing and not before.checkpointing:
        flags += ["--gradient_checkpointing", "true"]
    if after.train_batch_size != before.train_batch_size:
        flags += ["--train_batch_size", str(after.train_batch_size)]
        flags += ["--gradient_accumulation_steps", str(after.gradient_accumulation_steps)]
    if after.quantized != before.quantized:
        flags += ["--quantize_base", after.quantized or "none"]
    if after.text_encoder_quantized and not before.text_encoder_quantized:
        flags += ["--quantize_text_encoder", "true"]
    if after.activation_offloading and not before.activation_offloading:
        flags += ["--activation_offloading", "true"]
    if after.blocks_to_swap != before.blocks_to_swap:
        flags += ["--blocks_to_swap", str(after.blocks_to_swap)]
    cut = largest_bucket(after)
    if cut != largest_bucket(before):
        cuts = token_cuts(largest_bucket(before), before.fixed_size)
        flags += next((f for _, bucket, f in cuts if bucket == cut), [])
    return flags


def launch_flags(before: Plan, after: Plan) -> list[str]:
    """The ``dit-lora launch`` options ``after`` needs beyond ``before``'s (FSDP2's accelerate config)."""
    if after.engine == "fsdp2" and before.engine != "fsdp2":
        return ["--config_file", "accelerate_configs/fsdp2.yaml"]
    return []
