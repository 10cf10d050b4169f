#!/usr/bin/env python
"""``--activation_offloading`` on a real block stack, gradient checkpointing on and off: what it moves to host
memory, what it costs in step time, and (on CUDA) the device memory it saves (issue 35, point 5).

    HF_HUB_OFFLINE=1 python benchmarks/levers/activation_offload_cpu.py --threads 1 \\
        --out benchmarks/levers/activation_offload_cpu.json
    # the same script on a GPU (bf16 weights, fp32 LoRA masters, autocast), e.g. Sana 600M at its full depth:
    python benchmarks/levers/activation_offload_cpu.py --device cuda --layers 28 --resolution 1024 --batch 4 \\
        --out /tmp/activation_offload_gpu.json

The model: Sana 600M's transformer (diffusers' ``SanaTransformer2DModel`` from the catalogue's published config of
``Efficient-Large-Model/Sana_600M_1024px_diffusers``: 1152 wide, 16 heads x 72, caption 2304) cut to ``--layers``
blocks, random weights (seed 0, the same in every run), LoRA rank 32 on ``to_q/to_k/to_v/to_out.0`` through
dit-lora's ``add_lora`` with fp32 masters. Each (checkpointing, offloading) pair runs in a fresh child process:
``activation_offload.install`` as a run installs it (the owner of ``transformer_blocks``: the transformer), then AdamW
steps on random latents (``--resolution`` / 32 per side) and 300 caption tokens, loss MSE against a random target.

Reported per pair: the bytes the offloading copied to host memory per step and the most alive at once
(``OffloadStats``: on a GPU, the device memory the saved activations no longer take), the time spent in its hooks,
the median step time (wall and CPU) over ``--steps`` timed steps after ``--warmup``, the child's peak RSS, and on CUDA
``torch.cuda.max_memory_allocated`` over the timed steps. **On a CPU host memory and device memory are the same
memory**: the offloading's copies are memcpy into more of it, so the CPU figures show the overhead (copies, hooks,
and the copies in flight in the RSS), never a saving; the saving is the GPU's ``max_memory_allocated`` column. On a
CPU the losses with and without offloading must be equal bit for bit (``bitwise`` in the results).
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

HUB_ID = "Efficient-Large-Model/Sana_600M_1024px_diffusers"
BLOCKS = ("transformer_blocks",)


def build(args):
    """The transformer with LoRA, checkpointing as asked, offloading installed as a run installs it."""
    import torch
    from diffusers import SanaTransformer2DModel

    from dit_lora.catalogue import by_hub_id
    from dit_lora.modeling import activation_offload
    from dit_lora.modeling.trainables import add_lora, cast_trainable_to_fp32

    device = torch.device(args.device)
    config = {**by_hub_id(HUB_ID).configs["transformer/config.json"], "num_layers": args.layers}
    torch.manual_seed(0)
    model = SanaTransformer2DModel.from_config(config).to(args.dtype).requires_grad_(False).to(device)
    add_lora(model, rank=32, alpha=32, dropout=0.0, targets=("to_q", "to_k", "to_v", "to_out.0"), seed=0)
    cast_trainable_to_fp32(model, under_autocast=args.device == "cuda")
    if args.checkpointing:
        model.enable_gradient_checkpointing()
    offload = activation_offload.install(model, BLOCKS, args.offload, device)
    return model.train(), offload


def child(args) -> dict:
    """One run of ``--offload`` at ``--checkpointing``: the figures of the module docstring."""
    import torch

    torch.set_num_threads(args.threads)
    from dit_lora.modeling.activation_offload import ActivationOffload

    spent = lever_child.timed_methods(ActivationOffload, ("pack", "unpack"))
    args.dtype = getattr(torch, args.dtype)
    cuda = args.device == "cuda"
    model, offload = build(args)
    if not cuda:  # as a CPU run does from its first step (--cpu_reuse_memory, the default)
        from dit_lora.training.host_memory import reuse_freed_memory

        reuse_freed_memory()
    hook_s: list[float] = []

    def measured_start() -> None:
        if offload is not None:
            offload.stats = type(offload.stats)()  # the timed steps' counts only

    steps = lever_child.train_steps(
        model,
        lever_child.sana_batches(args, model, args.warmup + args.steps),
        args,
        measured_start=measured_start,
        before_step=lambda: spent.update(seconds=0.0),
        after_step=lambda: hook_s.append(spent["seconds"]),
    )
    times, cpu_times, losses = steps.times, steps.cpu_times, steps.losses
    stats = offload.stats if offload is not None else None
    return {
        "checkpointing": args.checkpointing,
        "offload": args.offload,
        "offloaded_bytes_per_step": stats.offloaded_bytes // args.steps if stats else 0,
        "offloaded_tensors_per_step": stats.offloaded / args.steps if stats else 0,
        "shared_saves_per_step": stats.shared / args.steps if stats else 0,
        "kept_saves_per_step": stats.kept / args.steps if stats else 0,
        "host_copies_peak_bytes": stats.peak_host_bytes if stats else 0,
        "hooks_s_per_step_median": statistics.median(hook_s),
        "step_s_median": statistics.median(times),
        "step_s": times,
        "step_cpu_s_median": statistics.median(cpu_times),
        "step_cpu_s": cpu_times,
        "losses": losses,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else None,
    }


def run_child(args, checkpointing: bool, offload: bool) -> dict:
    keys = ("device", "layers", "resolution", "batch", "steps", "warmup", "threads", "dtype")
    setting = argparse.Namespace(**{**vars(args), "checkpointing": checkpointing})
    extra = ["--offload", "on" if offload else "off"]
    return lever_child.run_child(__file__, setting, keys, extra, f"checkpointing {checkpointing}, offload {offload}")


def markdown(rows: list[dict]) -> str:
    gib = 2**30
    lines = [
        "| checkpointing | offloading | copied to host per step | host copies at once | tensors offloaded / shared /"
        " kept per step | in the hooks | step s (median) | step CPU s (median) | peak RSS | CUDA max allocated |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cuda = f"{r['cuda_max_memory_allocated'] / gib:.2f} GiB" if r["cuda_max_memory_allocated"] else "-"
        lines.append(
            f"| {'on' if r['checkpointing'] else 'off'} | {'on' if r['offload'] else 'off'} | "
            f"{r['offloaded_bytes_per_step'] / gib:.3f} GiB | {r['host_copies_peak_bytes'] / gib:.3f} GiB | "
            f"{r['offloaded_tensors_per_step']:.0f} / {r['shared_saves_per_step']:.0f} / {r['kept_saves_per_step']:.0f} "
            f"| {r['hooks_s_per_step_median']:.3f} s | {r['step_s_median']:.2f} | {r['step_cpu_s_median']:.2f} | "
            f"{r['peak_rss_bytes'] / gib:.2f} GiB | {cuda} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    lever_child.step_arguments(parser, layers=4, resolution=512, batch=1, steps=3, warmup=1, threads=2)
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the pairs, interleaved")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", default="on", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--offload", default="off", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    if args.child:
        args.checkpointing, args.offload = args.checkpointing == "on", args.offload == "on"
        print(json.dumps(child(args)))
        return
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("--device cuda: no CUDA device here (the CPU figures: --device cpu)", file=sys.stderr)
            raise SystemExit(2)
    pairs = [(gc, off) for gc in (False, True) for off in (False, True)]
    load_before = os.getloadavg()
    runs: dict[tuple[bool, bool], list[dict]] = {pair: [] for pair in pairs}
    for _ in range(args.repeats):
        for pair in pairs:
            runs[pair].append(run_child(args, *pair))
            print(f"checkpointing {pair[0]}, offloading {pair[1]}: {runs[pair][-1]['step_s_median']:.2f} s/step",
                  flush=True)
    rows = []
    for pair in pairs:
        row = dict(runs[pair][0])
        row["step_s"] = [t for run in runs[pair] for t in run["step_s"]]
        row["step_s_median"] = statistics.median(row["step_s"])
        row["step_cpu_s"] = [t for run in runs[pair] for t in run["step_cpu_s"]]
        row["step_cpu_s_median"] = statistics.median(row["step_cpu_s"])
        row["repeat_medians"] = [run["step_s_median"] for run in runs[pair]]
        rows.append(row)
    by_pair = dict(zip(pairs, rows))
    bitwise = (
        all(by_pair[gc, True]["losses"] == by_pair[gc, False]["losses"] for gc in (False, True))
        if args.device == "cpu"
        else None
    )
    result = {
        "benchmark": "activation_offload", "model": f"{HUB_ID} transformer, {args.layers} blocks, random weights",
        "device": args.device, "machine": machine_environment(child_environment()), "platform": platform.platform(),
        "settings": {k: getattr(args, k) for k in ("layers", "resolution", "batch", "steps", "warmup", "threads",
                                                    "dtype", "repeats")},
        "load_average_before_after": [load_before, os.getloadavg()],
        "bitwise": bitwise, "runs": rows, "markdown": markdown(rows),
    }
    print(result["markdown"])
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
