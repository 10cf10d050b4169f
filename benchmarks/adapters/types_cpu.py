#!/usr/bin/env python
"""The cost of each adapter type (``--lora_type lora|dora|lokr|loha``) against plain LoRA on a CPU: trainable
parameters, optimizer state, step time (CPU seconds) and peak RSS (issue 37, point 1).

    HF_HUB_OFFLINE=1 python benchmarks/adapters/types_cpu.py --threads 1 --repeats 2 \\
        --out benchmarks/adapters/types_cpu.json
    # the same script on a GPU (bf16 weights and autocast, fp32 adapter masters):
    python benchmarks/adapters/types_cpu.py --device cuda --layers 28 --resolution 1024 --batch 4 \\
        --out /tmp/types_gpu.json

The model: the Sana demo's widths (``--model small``, the default, or ``tiny``: dit-lora's ``--demo_size``
transformers, ``families/sana/demo.py``), or Sana 600M's (``--model 600m``: the catalogue's published config of
``Efficient-Large-Model/Sana_600M_1024px_diffusers``, 1152 wide) cut to ``--layers`` blocks; random weights (seed 0,
the same in every run), fp32 on a CPU. The adapter goes on ``to_q/to_k/to_v/to_out.0`` through dit-lora's
``add_adapter`` (the run's own attach: PEFT's LoraConfig, LoraConfig(use_dora=True), LoKrConfig, LoHaConfig) at
``--rank`` (alpha = rank), fp32 masters. Each type runs in a fresh child process (peak RSS is per process): AdamW
steps on random latents and caption states, MSE loss; ``--steps`` timed steps after ``--warmup``.

The latents are ``--resolution`` / 32 a side (the lever benchmarks' batches: 16 x 16 tokens at the default 512) with
300 caption tokens, batch ``--batch``.

Reported per type: trainable parameters, the AdamW state's bytes (two fp32 moments a weight), the median step time in
CPU and wall seconds, the child's peak RSS, and each figure's ratio to plain LoRA.
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
TYPES = ("lora", "dora", "lokr", "loha")
TARGETS = ("to_q", "to_k", "to_v", "to_out.0")


def transformer_config(args) -> dict:
    """The transformer config of ``--model`` at ``--layers`` blocks."""
    if args.model in ("tiny", "small"):
        from dit_lora.families.sana.demo import get_tiny_sana_config

        config = dict(get_tiny_sana_config(args.model)["transformer"])
    else:
        from dit_lora.catalogue import by_hub_id

        config = dict(by_hub_id(HUB_ID).configs["transformer/config.json"])
    return {**config, "num_layers": args.layers or config["num_layers"]}


def build(args):
    """The transformer with the ``--kind`` adapter attached as a run attaches it, fp32 masters."""
    import torch
    from diffusers import SanaTransformer2DModel

    from dit_lora.config.schema import LoraOptions
    from dit_lora.modeling.trainables import add_adapter, cast_trainable_to_fp32

    torch.manual_seed(0)
    model = SanaTransformer2DModel.from_config(transformer_config(args)).to(args.dtype).requires_grad_(False)
    model = model.to(args.device)
    add_adapter(model, LoraOptions(lora_type=args.kind, rank=args.rank), targets=TARGETS, seed=0)
    cast_trainable_to_fp32(model, under_autocast=args.device == "cuda")
    return model.train()


def child(args) -> dict:
    """One type: the figures of the module docstring."""
    import torch

    torch.set_num_threads(args.threads)
    args.dtype = getattr(torch, args.dtype)
    cuda = args.device == "cuda"
    model = build(args)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not cuda:  # as a CPU run does from its first step (--cpu_reuse_memory, the default)
        from dit_lora.training.host_memory import reuse_freed_memory

        reuse_freed_memory()
    steps = lever_child.train_steps(model, lever_child.sana_batches(args, model, args.warmup + args.steps), args)
    return {
        "kind": args.kind,
        "trainable_params": sum(p.numel() for p in trainable),
        "optimizer_state_bytes": 2 * 4 * sum(p.numel() for p in trainable),
        "step_s_median": statistics.median(steps.times),
        "step_s": steps.times,
        "step_cpu_s_median": statistics.median(steps.cpu_times),
        "step_cpu_s": steps.cpu_times,
        "losses": steps.losses,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else None,
    }


def run_child(args, kind: str) -> dict:
    keys = ("device", "model", "layers", "resolution", "batch", "steps", "warmup", "threads", "dtype", "rank")
    setting = argparse.Namespace(**{**vars(args), "checkpointing": False})
    return lever_child.run_child(__file__, setting, keys, ["--kind", kind], kind)


def markdown(rows: list[dict]) -> str:
    base = next(r for r in rows if r["kind"] == "lora")
    mib = 2**20
    lines = [
        "| type | trainable params | AdamW state | step CPU s (median) | vs LoRA | step wall s (median) | peak RSS "
        "| vs LoRA | CUDA max allocated |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cuda = f"{r['cuda_max_memory_allocated'] / mib:.0f} MiB" if r["cuda_max_memory_allocated"] else "-"
        lines.append(
            f"| {r['kind']} | {r['trainable_params']:,} ({r['trainable_params'] / base['trainable_params']:.2f}x) | "
            f"{r['optimizer_state_bytes'] / mib:.2f} MiB | {r['step_cpu_s_median']:.3f} | "
            f"{r['step_cpu_s_median'] / base['step_cpu_s_median']:.2f}x | {r['step_s_median']:.3f} | "
            f"{r['peak_rss_bytes'] / mib:.0f} MiB | {(r['peak_rss_bytes'] - base['peak_rss_bytes']) / mib:+.0f} MiB | "
            f"{cuda} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="small", choices=("tiny", "small", "600m"))
    parser.add_argument("--rank", type=int, default=16)
    lever_child.step_arguments(parser, layers=0, layers_help="blocks (0: the model's own)", resolution=512, batch=4,
                               steps=10, warmup=2, threads=2)
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the types, interleaved")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="lora", choices=TYPES, help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", default="off", help=argparse.SUPPRESS)  # lever_child passes it
    args = parser.parse_args()
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    if args.child:
        print(json.dumps(child(args)))
        return
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {kind: [] for kind in TYPES}
    for _ in range(args.repeats):
        for kind in TYPES:
            runs[kind].append(run_child(args, kind))
            print(f"{kind}: {runs[kind][-1]['step_cpu_s_median']:.3f} CPU s/step", flush=True)
    rows = []
    for kind in TYPES:
        row = dict(runs[kind][0])
        for key in ("step_s", "step_cpu_s"):
            row[key] = [t for run in runs[kind] for t in run[key]]
            row[f"{key}_median"] = statistics.median(row[key])
        row["peak_rss_bytes"] = max(run["peak_rss_bytes"] for run in runs[kind])
        row["repeat_cpu_medians"] = [run["step_cpu_s_median"] for run in runs[kind]]
        rows.append(row)
    result = {
        "benchmark": "adapter_types",
        "model": f"Sana transformer ({args.model} widths), {transformer_config(args)['num_layers']} blocks, random",
        "device": args.device,
        "machine": machine_environment(child_environment()),
        "platform": platform.platform(),
        "settings": {
            k: getattr(args, k)
            for k in (
                "model",
                "layers",
                "resolution",
                "batch",
                "rank",
                "steps",
                "warmup",
                "threads",
                "dtype",
                "repeats",
            )
        },
        "load_average_before_after": [load_before, os.getloadavg()],
        "runs": rows,
        "markdown": markdown(rows),
    }
    print(result["markdown"])
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
