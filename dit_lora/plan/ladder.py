"""The fastest configuration that fits: a ladder of levers, climbed in the order a user would accept them.

Each :class:`Rung` is one lever: a function from the plan it builds on to the plan with the lever set
(:mod:`.levers`, no tracing again), or None where it does not apply. :data:`RUNGS` lists them cheapest first; the
ladder stops at the first rung whose predicted peak fits with the plan's worst measured GPU error kept free
(:data:`GPU_ERROR`: a rung fits at most :func:`room` of the card), so its flags are the fastest configuration the plan
knows that fits with that margin. Where none does, the lowest is said to fit narrowly, with its risk, unless it is
within :data:`NEVER_WITHIN` of the card (then none fits). Adding a lever is one entry. A rung that lowers no phase exceeding the memory (training, caching, loading)
is skipped, so no flag is proposed that buys nothing.

The order, and why:

1. as given;
2. ``--gradient_checkpointing true``: about a third more compute per step, no quality cost;
3. a smaller micro-batch with the accumulation that keeps the samples per update (only when the batch is above 1);
4. ``--quantize_text_encoder true``, only where the caching phase (the encoders beside the model) is what exceeds:
   the text encoder runs once per caption, so its 4-bit weights cost no step time;
5. ``--quantize_base fp8_scaled``: frozen weights stored in fp8 with per-block scales, computed in bf16;
5b. ``--activation_offloading true``: the checkpointed blocks' inputs wait in pinned host memory (copies on a side
   stream overlap the compute);
6. ``--blocks_to_swap N``, N the smallest that fits (the blocks in flight counted): frozen weights of N blocks in
   pinned host memory, copied over PCIe for each forward and backward, prefetched on a side stream;
7. with several GPUs, FSDP2 (``dit-lora launch --config_file accelerate_configs/fsdp2.yaml``) with the rungs 2-5:
   every rank holds a shard of the weights and all-gathers each block's for its forward and again for its backward;
8. ``--quantize_base nf4`` (and the text encoder's), instead of fp8_scaled and block swap (bitsandbytes' weights can
   be neither swapped nor sharded): a quality and speed cost;
9. fewer tokens: for video fewer frames (``--max_num_frames``, in the model's ``4k + 1`` rule), else a smaller size.

Block swap before FSDP2: both move the frozen weights once per forward and once per backward, but block swap keeps
DDP (each GPU copies over its own PCIe link, overlapped with compute, no collective to wait on) where FSDP2's
all-gathers are collectives every rank waits on per block, over the interconnect (through the host on cards without
NVLink, sharing the link among the GPUs); SimpleTuner measured DDP 3-6x faster than FSDP2 for LoRA where it fits.
FSDP2 comes first where swap cannot fit: what it shards besides the frozen weights (optimizer state and gradients of
a full fine-tune) block swap cannot move.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dit_lora.plan import host, levers
from dit_lora.plan.estimate import Plan

GIB = 2**30
#: The share of the card that every rung of the ladder, its answer, ``dit-lora plan``'s advice and the start-of-run
#: gate keep free: a prediction fits only at most ``1 - GPU_ERROR`` of the card. The records are benchmarks/RESULTS.md's
#: "Memory plan against the H100" (``benchmarks/plan/vs_gpu.py``) and the Wan section (``wan/step_gpu.py --predict``).
#: Step peaks (``max_memory_allocated``): under by 3.4-8.0% on Sana and CogVideoX (the 5b 4.8%, re-measured on an
#: H200 on 2026-11-26 with the model built in bf16: the earlier 15.2% was the benchmark's fp32 build), 14.2% on
#: LLaVA-NeXT-Video-7B, the worst; over by 1.9-12% on Wan. The margin stays one point above that worst error:
#: eleven measured settings are a small sample of what users run.
GPU_ERROR = 0.152
#: no configuration is proposed whose prediction is within this share of the card, not even as "fits, narrowly":
#: the ladder climbs further, and where no rung comes lower it says none fits
NEVER_WITHIN = 0.05


@dataclass
class Tried:
    """One rung as the ladder tried it."""

    rung: str
    plan: Plan
    flags: list[str]  # the recipe flags this rung adds to the plan it builds on
    cost: str  # what the lever costs per step, where the plan can say
    start: Plan | None = None  # the plan it builds on

    @property
    def peak(self) -> int:
        return self.plan.peak_memory_bytes


@dataclass(frozen=True)
class Rung:
    """One lever: ``climb(plan, capacity)`` is the plan with it set (None: it does not apply), built on the plan of
    the rung named ``on`` (None: the previous rung's), ``cost(before, after)`` what it costs per step."""

    name: str
    climb: Callable[[Plan, int], Plan | None]
    cost: Callable[[Plan, Plan], str]
    on: str | None = None


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _fits(plan: Plan, capacity: int) -> bool:
    return plan.peak_memory_bytes <= capacity


def room(capacity: int) -> int:
    """The bytes of a ``capacity``-byte card a prediction may take: the card less the plan's error (:data:`GPU_ERROR`)."""
    return int(capacity * (1 - GPU_ERROR))


def proposable(peak: int, capacity: int) -> bool:
    """Whether a configuration predicted at ``peak`` may be proposed at all on ``capacity`` bytes, narrowly: not
    within :data:`NEVER_WITHIN` of the card."""
    return peak <= capacity * (1 - NEVER_WITHIN)


def narrowly(peak: int, capacity: int) -> str:
    """The one phrase for a prediction under the card but inside the plan's error, and its risk (``dit-lora plan``,
    the ladder's answer, the start-of-run gate and the guides' tables say it alike)."""
    return (
        f"fits, narrowly: {_gib(peak)} of {_gib(capacity)}, inside the {GPU_ERROR:.0%} the plan has come out below a "
        "peak measured on a GPU (benchmarks/RESULTS.md), so the run may run out of memory"
    )


def _excess(plan: Plan, capacity: int) -> int:
    """How far the plan's phases (training, caching, loading, DDP's wrap) exceed ``capacity``, together."""
    return sum(max(phase + plan.process_bytes - capacity, 0) for phase in plan.phases().values())


def _smallest_batch(plan: Plan, capacity: int) -> Plan | None:
    """The largest smaller micro-batch (a divisor of the batch) whose plan fits, else batch 1."""
    if plan.train_batch_size <= 1:
        return None
    divisors = [b for b in range(plan.train_batch_size - 1, 0, -1) if plan.train_batch_size % b == 0]
    tried = [levers.with_batch(plan, b) for b in divisors]  # largest first; the last is batch 1
    return next((p for p in tried if _fits(p, capacity)), tried[-1])


def _fewest_swapped(plan: Plan, capacity: int) -> Plan | None:
    """The smallest ``--blocks_to_swap`` whose plan fits, else the most the model allows (one block stays)."""
    most = max((len(sizes) for sizes in plan.block_sizes), default=0) - 1  # counted on the longest list
    if most <= plan.blocks_to_swap or plan.device == "cpu" or plan.engine == "fsdp2":
        return None
    if plan.quantized in levers.LIBRARY_QUANTIZED:
        return None
    for count in range(plan.blocks_to_swap + 1, most + 1):
        swapped = levers.with_swap(plan, count)
        if _fits(swapped, capacity):
            return swapped
    return levers.with_swap(plan, most)


def _text_encoder_nf4(plan: Plan, capacity: int) -> Plan | None:
    """``--quantize_text_encoder true`` where the caching phase (the encoders beside the model) exceeds ``capacity``."""
    caching = (plan.cache_phase_bytes or 0) + plan.process_bytes
    if plan.text_encoder_quantized or not plan.nf4_text_encoder_savings or caching <= capacity:
        return None
    return levers.with_text_encoder_nf4(plan)


def _nf4(plan: Plan, capacity: int) -> Plan | None:
    """``--quantize_base nf4`` and the text encoder's, in place of fp8_scaled and block swap (bitsandbytes' weights can
    be neither swapped nor sharded: not under FSDP2)."""
    if plan.quantized == "nf4" or plan.engine == "fsdp2" or not plan.quantize_savings.get("nf4"):
        return None
    return levers.with_quantization(levers.with_swap(plan, 0), "nf4", text_encoder=True)


def _fewer_tokens(plan: Plan, capacity: int) -> Plan | None:
    """The largest cut of the largest bucket that fits, else the smallest the ladder proposes."""
    cuts = levers.token_cuts(levers.largest_bucket(plan), plan.fixed_size)
    tried = [levers.with_tokens(plan, share, bucket) for share, bucket, _ in cuts]
    return next((p for p in tried if _fits(p, capacity)), tried[-1] if tried else None)


def _flop_cost(before: Plan, after: Plan) -> str:
    extra = after.flops_per_update() / max(before.flops_per_update(), 1) - 1
    return f"+{extra:.0%} FLOPs per step (each block's forward again in the backward)"


def _swap_cost(before: Plan, after: Plan) -> str:
    return (
        f"{_gib(2 * after.swapped_bytes)} host-to-device per step over PCIe, "
        f"{_gib(after.swapped_bytes)} of pinned host memory"
    )


def _fsdp2_cost(before: Plan, after: Plan) -> str:
    replicated = after.fp8_linear_bytes if after.quantized == "fp8_scaled" else 0
    gathered = (after.weights[after.trained_component] - replicated) * (after.num_processes - 1) // after.num_processes
    return f"2 all-gathers of {_gib(gathered)} per rank per step (forward and backward), over the interconnect"


def _offload_cost(before: Plan, after: Plan) -> str:
    host = after.offloaded_host_bytes()
    return f"{_gib(host)} to host and back per step, {_gib(host)} of pinned host memory"


def _token_cost(before: Plan, after: Plan) -> str:
    return f"trains on {levers.largest_bucket(after)} instead of {levers.largest_bucket(before)}"


#: the levers, cheapest first (module docstring): adding one is one entry
RUNGS: tuple[Rung, ...] = (
    Rung("as given", lambda plan, capacity: plan, lambda before, after: "-"),
    Rung("gradient checkpointing", lambda plan, capacity: levers.with_checkpointing(plan), _flop_cost),
    Rung(
        "smaller micro-batch",
        _smallest_batch,
        lambda before, after: "the same samples per update, in smaller matmuls",
    ),
    Rung(
        "nf4 text encoder",
        _text_encoder_nf4,
        lambda before, after: (
            f"caching phase {_gib(before.cache_phase_bytes or 0)} -> "
            f"{_gib(after.cache_phase_bytes or 0)}; none per step (the text encoder runs once per caption); bitsandbytes"
        ),
    ),
    Rung(
        "fp8_scaled base",
        lambda plan, capacity: (
            None
            if plan.quantized or not plan.quantize_savings.get("fp8_scaled")
            else levers.with_quantization(plan, "fp8_scaled")
        ),
        lambda before, after: (
            "each Linear weight dequantized to the compute dtype per use; fp8 rounding of the frozen weights"
        ),
    ),
    Rung("activation offloading", lambda plan, capacity: levers.with_offloading(plan), _offload_cost),
    Rung("block swap", _fewest_swapped, _swap_cost),
    Rung("FSDP2", lambda plan, capacity: levers.with_fsdp2(plan), _fsdp2_cost, on="activation offloading"),
    Rung(
        "nf4 base",
        _nf4,
        lambda before, after: "4-bit frozen weights: slower matmuls and a larger quantization error than fp8",
        on="activation offloading",
    ),
    Rung("fewer tokens", _fewer_tokens, _token_cost, on=""),  # "": the lowest peak tried so far
)


@dataclass
class Ladder:
    """The rungs tried on a card of ``capacity`` bytes per process, cheapest first, up to the first that fits with
    the plan's error kept free (:func:`room`)."""

    base: Plan
    capacity: int
    tried: list[Tried] = field(default_factory=list)

    @property
    def room(self) -> int:
        """What a fitting prediction may take of the card: :func:`room`."""
        return room(self.capacity)

    @property
    def chosen(self) -> Tried | None:
        """The first rung that fits with the margin (the fastest configuration the plan knows), None when none does."""
        return next((t for t in self.tried if _fits(t.plan, self.room)), None)

    @property
    def closest(self) -> Tried:
        """The rung with the lowest peak (what to say when none fits)."""
        return min(self.tried, key=lambda t: t.peak)

    @property
    def narrow(self) -> Tried | None:
        """When no rung keeps the margin: the closest, if it fits the card narrowly (not within :data:`NEVER_WITHIN`
        of it), else None."""
        if self.chosen is not None or not self.tried or not proposable(self.closest.peak, self.capacity):
            return None
        return self.closest

    @property
    def recommended(self) -> Plan:
        """The plan to propose: the chosen rung's; the closest rung's when none fits with the margin."""
        return (self.chosen or self.closest).plan

    def flags(self, tried: Tried | None = None) -> list[str]:
        """Every recipe flag from the configuration as given to ``tried``'s (the recommended plan by default)."""
        return levers.flags_between(self.base, tried.plan if tried is not None else self.recommended)

    def launch_flags(self, tried: Tried | None = None) -> list[str]:
        """The ``dit-lora launch`` options of ``tried``'s configuration (the chosen one by default): with several
        processes the accelerate config of its engine and the process count, so the flags start that many."""
        target = (tried or self.chosen or self.closest).plan
        if target.num_processes <= 1:
            return levers.launch_flags(self.base, target)
        config = "fsdp2.yaml" if target.engine == "fsdp2" else "multi_gpu.yaml"
        return ["--config_file", f"accelerate_configs/{config}", "--num_processes", str(target.num_processes)]

    def as_dict(self) -> dict[str, Any]:
        """The ladder for ``--json``: each rung tried and the chosen flags."""
        chosen, narrow = self.chosen, self.narrow
        return {
            "capacity_bytes": self.capacity,
            "gpu_error": GPU_ERROR,
            "room_bytes": self.room,  # what a fitting prediction may take: the card less the plan's error
            "rungs": [
                {
                    "rung": t.rung,
                    "flags": t.flags,
                    "peak_memory_bytes": t.peak,
                    "fits": _fits(t.plan, self.room),
                    "narrowly": not _fits(t.plan, self.room) and _fits(t.plan, self.capacity),
                    "step_cost": t.cost,
                    "engine": t.plan.engine,
                }
                for t in self.tried
            ],
            "chosen": None if chosen is None else chosen.rung,
            "narrow": None if narrow is None else narrow.rung,
            "flags": self.flags(),
            "launch_flags": self.launch_flags(),
            "peak_memory_bytes": self.recommended.peak_memory_bytes,
        }


def climb(plan: Plan, capacity: int, rungs: tuple[Rung, ...] = RUNGS) -> Ladder:
    """Try ``rungs`` on ``plan`` in order until one fits on ``capacity`` bytes per process with the plan's error kept
    free: each rung sizes its lever (blocks swapped, batch, tokens) for :func:`room`, not for the card."""
    ladder = Ladder(plan, capacity)
    budget = ladder.room
    after: dict[str, Plan] = {}  # rung name -> the plan in effect after it (its own, or the one it passed on)
    previous = plan
    for rung in rungs:
        if rung.on == "":
            start = min((t.plan for t in ladder.tried), key=lambda p: p.peak_memory_bytes)
        else:
            start = after.get(rung.on, previous) if rung.on else previous
        climbed = rung.climb(start, budget)
        if climbed is not None and climbed is not start and _excess(climbed, budget) >= _excess(start, budget):
            climbed = None  # it lowers no phase that exceeds: its cost would buy nothing
        after[rung.name] = climbed or start
        previous = after[rung.name] if rung.on is None else previous
        if climbed is None:
            continue
        added = levers.launch_flags(start, climbed) + levers.flags_between(start, climbed)
        ladder.tried.append(Tried(rung.name, climbed, added, rung.cost(start, climbed), start))
        if _fits(climbed, budget):
            break
    return ladder


def format_ladder(ladder: Ladder) -> str:
    """The ladder as a table (one line per rung tried), then the flags to copy and their predicted peak."""
    rows = [("rung", "flags added", "peak per GPU", "fits", "step cost")]
    for t in ladder.tried:
        fits = "yes" if _fits(t.plan, ladder.room) else "narrowly" if _fits(t.plan, ladder.capacity) else "no"
        rows.append((t.rung, " ".join(t.flags) or "-", _gib(t.peak), fits, t.cost))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        f"ladder on {_gib(ladder.capacity)} per GPU, keeping the plan's {GPU_ERROR:.0%} error free (a rung fits at "
        f"{_gib(ladder.room)} or less; cheapest lever first, up to the first that fits):"
    ]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
    lines.append(answer(ladder))
    return "\n".join(lines)


def answer(ladder: Ladder) -> str:
    """One sentence: the flags to copy and the peak they give (the plan's error kept free), else the lowest the ladder
    reaches: narrowly, with its risk, or not at all."""
    chosen = ladder.chosen
    target = chosen or ladder.closest
    flags = " ".join(ladder.flags(target)) or "(none)"
    launch = ladder.launch_flags(target)
    via = f", launched with `dit-lora launch {' '.join(launch)}`" if launch else ""
    keeps = f"leaving the {GPU_ERROR:.0%} the plan has come out below a peak measured on a GPU"
    if chosen is not None and chosen.rung == RUNGS[0].name:
        return f"fits as given (predicted peak {_gib(chosen.peak)} of {_gib(ladder.capacity)}, {keeps})"
    if chosen is not None:
        on_host = f"; host memory {host.summary(chosen.plan)}" if chosen.plan.device != "cpu" else ""
        return (
            f"flags to copy: {flags}{via} (predicted peak {_gib(chosen.peak)} of {_gib(ladder.capacity)}, {keeps}"
            f"{on_host})"
        )
    if ladder.narrow is not None:  # no lever keeps the margin: the lowest, said with its risk
        return (
            f"no lever the plan knows keeps its {GPU_ERROR:.0%} error free on {_gib(ladder.capacity)}; the lowest it "
            f"reaches, {flags}{via}, {narrowly(target.peak, ladder.capacity)}: train on a device with more memory to "
            "be sure"
        )
    text = (
        f"no lever the plan knows fits {_gib(ladder.capacity)} with its {GPU_ERROR:.0%} error kept free: the lowest "
        f"it reaches is {_gib(target.peak)} with {flags}{via}; train on a device with more memory"
    )
    caching = (target.plan.cache_phase_bytes or 0) + target.plan.process_bytes
    if caching > ladder.room:  # the encoders beside the model: a larger device builds the cache once
        text += (
            f", or build the latent cache (its phase: {_gib(caching)}, the encoders beside the model) once on a larger "
            "device and train here with the same --cache_dir"
        )
    return text
