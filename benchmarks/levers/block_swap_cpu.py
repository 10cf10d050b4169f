#!/usr/bin/env python
"""``--blocks_to_swap N`` on a real block stack: the device's resident block weights and the step time, N = 0, 1
and half the blocks (issue 35, points 2 and 5).

    HF_HUB_OFFLINE=1 python benchmarks/levers/block_swap_cpu.py --out benchmarks/levers/block_swap_cpu.json
    # the same script on a GPU (bf16 weights, fp32 LoRA masters, autocast), e.g. Sana 600M at its full depth:
    python benchmarks/levers/block_swap_cpu.py --device cuda --layers 28 --resolution 1024 --batch 4 \\
        --out /tmp/block_swap_gpu.json

The model: Sana 600M's transformer (diffusers' ``SanaTransformer2DModel`` from the catalogue's published config of
``Efficient-Large-Model/Sana_600M_1024px_diffusers``: 1152 wide, 16 heads x 72, caption 2304) cut to ``--layers``
blocks, random weights (seed 0, the same in every run), LoRA rank 32 on ``to_q/to_k/to_v/to_out.0`` through
dit-lora's ``add_lora`` with fp32 masters, diffusers' gradient checkpointing on (``--checkpointing``). Each N runs in a
fresh child process, in the order a run takes: the family loader's ``park_blocks`` before ``.to(device)``, LoRA,
``block_swap.install``, accelerate's ``.to(device)`` again; then AdamW steps on random latents (``--resolution`` / 32
per side: DC-AE's factor) and 300 caption tokens, loss MSE against a random target.

Reported per N: the block stack's resident weights on the device, counted as the memory plan counts them (on a CPU
host memory is the device's, so the bytes are counted, not the process's RSS): the frozen bytes of the blocks that
stay, plus the most bytes of swapped blocks' device copies alive at once (``BlockSwap.stats.peak_bytes``); the
plan's prediction of the same (``plan.placement.SWAP_IN_FLIGHT``); the median step time over ``--steps`` timed steps
after ``--warmup`` (a CPU's copies are memcpy, so this is the swap's bookkeeping and copy cost, not PCIe's; the
children keep freed memory for reuse as a CPU run does, ``--cpu_reuse_memory``), the time spent in the swap's calls
and the bytes it copied per step; the
child's peak RSS; on CUDA ``torch.cuda.max_memory_allocated`` over the timed steps. On a CPU the losses of every N
must equal N = 0's bit for bit (``bitwise`` in the results). ``--repeats R`` runs the Ns round-robin R times (a
shared machine's load moves between runs: the step time is the median over every repeat's timed steps, each repeat's
median kept); the load average before and after is recorded, and each step's CPU time (``time.process_time``) beside
its wall time: on a shared machine with ``--threads 1`` the CPU time is what the step costs, the wall time also what
the other jobs took.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))
from benchmarks.common import lever_child  # noqa: E402
from benchmarks.common.cpu_harness import child_environment, machine_environment  # noqa: E402
from benchmarks.common.lever_child import train_steps  # noqa: E402

HUB_ID = "Efficient-Large-Model/Sana_600M_1024px_diffusers"
BLOCKS = ("transformer_blocks",)


def build(args, swap: int):
    """The transformer with LoRA, parked and placed as a run places it; its BlockSwap (None at 0)."""
    import torch
    from diffusers import SanaTransformer2DModel

    from dit_lora.catalogue import by_hub_id
    from dit_lora.modeling import block_swap
    from dit_lora.modeling.trainables import add_lora, cast_trainable_to_fp32

    device = torch.device(args.device)
    config = {**by_hub_id(HUB_ID).configs["transformer/config.json"], "num_layers": args.layers}
    torch.manual_seed(0)
    model = SanaTransformer2DModel.from_config(config).to(args.dtype).requires_grad_(False)
    block_swap.park_blocks(model, BLOCKS, swap, device)  # the loader's call
    model.to(device)
    add_lora(model, rank=32, alpha=32, dropout=0.0, targets=("to_q", "to_k", "to_v", "to_out.0"), seed=0)
    cast_trainable_to_fp32(model, under_autocast=args.device == "cuda")
    if args.checkpointing:
        model.enable_gradient_checkpointing()
    swapper = block_swap.install(model, BLOCKS, swap, device)
    model.to(device)  # accelerate's placement
    return model.train(), swapper


def child(args) -> dict:
    """One run at ``--swap`` blocks: the figures of the module docstring."""
    import torch

    from dit_lora.modeling.host_parking import frozen_slots

    torch.set_num_threads(args.threads)
    from dit_lora.modeling.swap_hooks import BlockSwap

    spent = lever_child.timed_methods(BlockSwap, ("_bring", "_park"))
    args.dtype = getattr(torch, args.dtype)
    cuda = args.device == "cuda"
    model, swapper = build(args, args.swap)
    if not cuda:  # as a CPU run does from its first step (--cpu_reuse_memory, the default): freed copies are reused
        from dit_lora.training.host_memory import reuse_freed_memory

        reuse_freed_memory()
    blocks = list(model.transformer_blocks)
    block_bytes = [sum(t.numel() * t.element_size() for _, _, t in frozen_slots(b)) for b in blocks]
    kept = sum(block_bytes[: len(blocks) - args.swap])
    swap_s: list[float] = []
    steps = train_steps(
        model,
        lever_child.sana_batches(args, model, args.warmup + args.steps),
        args,
        before_step=lambda: spent.update(seconds=0.0),
        after_step=lambda: swap_s.append(spent["seconds"]),
    )
    times, cpu_times, losses = steps.times, steps.cpu_times, steps.losses
    copies = swapper.stats.peak_bytes if swapper is not None else 0
    return {
        "swap": args.swap,
        "block_bytes": block_bytes[-1],
        "blocks_bytes": sum(block_bytes),
        "device_block_weights_peak": kept + copies,
        "swap_copies_peak": copies,
        "swap_copies_made": swapper.stats.copies if swapper is not None else 0,
        "step_s_median": statistics.median(times),
        "step_s": times,
        "step_cpu_s_median": statistics.median(cpu_times),
        "step_cpu_s": cpu_times,
        "swap_s_per_step_median": statistics.median(swap_s),
        "copied_bytes_per_step": (swapper.stats.copies if swapper is not None else 0) * block_bytes[-1]
        // (args.warmup + args.steps),
        "losses": losses,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else None,
    }


def predicted(result: dict, device: str) -> dict:
    """The plan's figures for the run (``plan.estimate``): the block weights on the device (all of them less the
    swapped ones plus those in flight, :data:`SWAP_IN_FLIGHT` of this kind of device), and what the swap adds to a
    CPU process (host memory is the device's there: only the copies in flight)."""
    from dit_lora.plan.placement import SWAP_IN_FLIGHT

    n, block = result["swap"], result["block_bytes"]
    in_flight = min(n, SWAP_IN_FLIGHT["cpu" if device == "cpu" else "accelerator"]) * block
    return {
        "plan_device_block_weights": result["blocks_bytes"] - n * block + in_flight,
        "plan_cpu_process_change": in_flight if device == "cpu" else None,
    }


def run_child(args, swap: int) -> dict:
    keys = ("device", "layers", "resolution", "batch", "steps", "warmup", "threads", "dtype")
    return lever_child.run_child(__file__, args, keys, ["--swap", str(swap)], f"swap {swap}")


def markdown(rows: list[dict], device: str) -> str:
    gib = 2**30
    head = ("| --blocks_to_swap | block weights on the device (counted) | plan | swapped blocks' copies at once | "
            "copied per step | in the swap's calls | step s (median) | step CPU s (median) | peak RSS (change) | "
            "plan's RSS change | CUDA max allocated |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        cuda = f"{r['cuda_max_memory_allocated'] / gib:.2f} GiB" if r["cuda_max_memory_allocated"] else "-"
        rss = r["peak_rss_bytes"] - rows[0]["peak_rss_bytes"]
        plan_rss = f"+{r['plan_cpu_process_change'] / gib:.3f} GiB" if r["plan_cpu_process_change"] is not None else "-"
        lines.append(
            f"| {r['swap']} | {r['device_block_weights_peak'] / gib:.3f} GiB | {r['plan_device_block_weights'] / gib:.3f}"
            f" GiB | {r['swap_copies_peak'] / r['block_bytes']:.0f} | {r['copied_bytes_per_step'] / gib:.2f} GiB | "
            f"{r['swap_s_per_step_median']:.3f} s | {r['step_s_median']:.2f} | {r['step_cpu_s_median']:.2f} | "
            f"{r['peak_rss_bytes'] / gib:.2f} GiB ({rss / gib:+.3f}) | {plan_rss} | {cuda} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    lever_child.step_arguments(parser, layers=8, resolution=256, batch=1, steps=4, warmup=1, threads=2)
    parser.add_argument("--checkpointing", default="on", choices=("on", "off"))
    parser.add_argument("--swaps", default=None, help="comma-separated N (default: 0, 1, half the blocks)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the Ns, interleaved")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--swap", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.checkpointing = args.checkpointing == "on"
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("--device cuda: no CUDA device here (the CPU figures: --device cpu)", file=sys.stderr)
            raise SystemExit(2)
    swaps = [int(n) for n in args.swaps.split(",")] if args.swaps else sorted({0, 1, args.layers // 2})
    load_before = os.getloadavg()
    runs: dict[int, list[dict]] = {n: [] for n in swaps}
    for _ in range(args.repeats):
        for n in swaps:
            runs[n].append(run_child(args, n))
            print(f"swap {n}: {runs[n][-1]['step_s_median']:.2f} s/step, device block weights "
                  f"{runs[n][-1]['device_block_weights_peak'] / 2**30:.3f} GiB", flush=True)
    rows = []
    for n in swaps:
        row = dict(runs[n][0])
        row["step_s"] = [t for run in runs[n] for t in run["step_s"]]
        row["step_s_median"] = statistics.median(row["step_s"])
        row["step_cpu_s"] = [t for run in runs[n] for t in run["step_cpu_s"]]
        row["step_cpu_s_median"] = statistics.median(row["step_cpu_s"])
        row["repeat_medians"] = [run["step_s_median"] for run in runs[n]]
        row["losses_every_repeat_equal"] = all(run["losses"] == row["losses"] for run in runs[n])
        row.update(predicted(row, args.device))
        rows.append(row)
    bitwise = all(r["losses"] == rows[0]["losses"] for r in rows) if args.device == "cpu" else None
    result = {
        "benchmark": "block_swap", "model": f"{HUB_ID} transformer, {args.layers} blocks, random weights",
        "device": args.device, "machine": machine_environment(child_environment()), "platform": platform.platform(),
        "settings": {k: getattr(args, k) for k in ("layers", "resolution", "batch", "steps", "warmup", "threads",
                                                    "dtype", "checkpointing", "repeats")},
        "load_average_before_after": [load_before, os.getloadavg()],
        "bitwise": bitwise, "runs": rows, "markdown": markdown(rows, args.device),
    }
    print(result["markdown"])
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
