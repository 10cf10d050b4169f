#!/usr/bin/env python
"""``--use_ema`` against plain LoRA: what the EMA of the trainable weights costs per step and in memory (issue 37,
point 2).

    HF_HUB_OFFLINE=1 python benchmarks/levers/ema_cpu.py --threads 1 --repeats 2 --out benchmarks/levers/ema_cpu.json
    # on a GPU, where --ema_device cpu really moves the EMA to host memory:
    python benchmarks/levers/ema_cpu.py --device cuda --model sana600m --layers 28 --resolution 1024 --batch 4 \\
        --out /tmp/ema_gpu.json

The model: Sana's transformer at the demo's widths (``--model demo-small``: the ``small`` demo model of
``dit_lora.families.sana.demo``, 320 wide, 5 blocks; ``demo-tiny``: the tests' 32-wide one) or Sana 600M's
(``sana600m``: the catalogue's config of ``Efficient-Large-Model/Sana_600M_1024px_diffusers``, 1152 wide, cut to
``--layers`` blocks), random weights (seed 0), LoRA rank ``--rank`` on ``to_q/to_k/to_v/to_out.0`` with fp32
masters, fp32 on a CPU. Each setting runs in a fresh child process: ``plain`` (no EMA), ``ema`` (``--use_ema``: the
EMA on the training device) and ``ema_cpu`` (``--use_ema --ema_device cpu``), AdamW steps on random latents and
captions with the EMA updated after each step as the loop updates it (:class:`dit_lora.training.ema.TrainableEMA`,
weighted by a device skip flag of 0).

Reported per setting: the median step time (wall and CPU) over ``--steps`` timed steps after ``--warmup``, the EMA
update's own time per step, the EMA's bytes, the child's peak resident set (``VmHWM``: this program's own high-water
mark), and on CUDA ``torch.cuda.max_memory_allocated``. **On a CPU the training device is the host**: ``ema`` and
``ema_cpu`` are the same code path and the same memory (the EMA's fp32 copy in RAM either way); the difference
``--ema_device cpu`` makes (device memory saved, the host copy's cost) shows only with ``--device cuda``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))
from benchmarks.common import lever_child  # noqa: E402
from benchmarks.common.cpu_harness import child_environment, machine_environment  # noqa: E402

HUB_ID = "Efficient-Large-Model/Sana_600M_1024px_diffusers"
SETTINGS = ("plain", "ema", "ema_cpu")


def transformer_config(args) -> dict:
    """The transformer's config for ``--model``."""
    if args.model == "sana600m":
        from dit_lora.catalogue import by_hub_id

        return {**by_hub_id(HUB_ID).configs["transformer/config.json"], "num_layers": args.layers}
    from dit_lora.families.sana.demo import get_tiny_sana_config

    return get_tiny_sana_config(args.model.removeprefix("demo-"))["transformer"]


def peak_rss_bytes() -> int:
    """``VmHWM`` of /proc/self/status: the high-water mark of this process's own resident memory."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def child(args) -> dict:
    """One setting: the figures of the module docstring."""
    import torch
    from diffusers import SanaTransformer2DModel

    from dit_lora.config import TrainConfig
    from dit_lora.modeling.trainables import add_lora, cast_trainable_to_fp32
    from dit_lora.training.ema import TrainableEMA

    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    args.dtype = dtype  # as lever_child.sana_batches reads it
    torch.manual_seed(0)
    model = SanaTransformer2DModel.from_config(transformer_config(args)).to(dtype).requires_grad_(False).to(device)
    add_lora(model, rank=args.rank, alpha=args.rank, dropout=0.0, targets=("to_q", "to_k", "to_v", "to_out.0"), seed=0)
    cast_trainable_to_fp32(model, under_autocast=cuda)
    model.train()
    ema = None
    if args.setting != "plain":
        training = TrainConfig.for_family("sana", use_ema=True, ema_device="cpu" if args.setting == "ema_cpu" else
                                          "accelerator").training
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        ema = TrainableEMA(params, training, device, on_host=args.setting == "ema_cpu")
    if not cuda:  # as a CPU run does from its first step (--cpu_reuse_memory, the default)
        from dit_lora.training.host_memory import reuse_freed_memory

        reuse_freed_memory()
    skipped = torch.zeros((), device=device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    times, cpu_times, ema_times, ema_cpu_times = [], [], [], []
    for i, batch in enumerate(lever_child.sana_batches(args, model, args.warmup + args.steps)):
        if i == args.warmup and cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start, cpu_start = time.perf_counter(), time.process_time()
        with torch.autocast("cuda", dtype=dtype, enabled=cuda and dtype != torch.float32):
            pred = model(**{k: batch[k] for k in ("hidden_states", "encoder_hidden_states", "timestep")},
                         return_dict=False)[0]
        loss = (pred.float() - batch["target"]).pow(2).mean()
        loss.backward()
        opt.step()
        ema_start, ema_cpu_start = time.perf_counter(), time.process_time()
        if ema is not None:
            ema.update(skipped)  # as the loop does after the guarded step
        ema_s, ema_cpu_s = time.perf_counter() - ema_start, time.process_time() - ema_cpu_start
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
            ema_times.append(ema_s)
            ema_cpu_times.append(ema_cpu_s)
    if ema is not None:
        ema.flush()
    return {
        "setting": args.setting,
        "trainable_bytes": sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad),
        "ema_bytes": sum(s.numel() * s.element_size() for s in ema.shadow) if ema else 0,
        "ema_on": ("host" if ema.host else "cpu (the device)" if device.type == "cpu" else str(device)) if ema else None,
        "ema_update_s_median": statistics.median(ema_times),
        "ema_update_cpu_s_median": statistics.median(ema_cpu_times),
        "step_s_median": statistics.median(times),
        "step_s": times,
        "step_cpu_s_median": statistics.median(cpu_times),
        "step_cpu_s": cpu_times,
        "peak_rss_bytes": peak_rss_bytes(),
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else None,
    }


def run_child(args, setting: str) -> dict:
    keys = ("device", "model", "layers", "resolution", "batch", "rank", "steps", "warmup", "threads", "dtype")
    setting_args = argparse.Namespace(**{**vars(args), "checkpointing": False})
    return lever_child.run_child(__file__, setting_args, keys, ["--setting", setting], setting)


def markdown(rows: list[dict]) -> str:
    mib = 2**20
    lines = [
        "| setting | EMA bytes | EMA on | EMA update per step (wall / CPU) | step s (median) | step CPU s (median) | "
        "peak RSS | CUDA max allocated |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cuda = f"{r['cuda_max_memory_allocated'] / mib:.0f} MiB" if r["cuda_max_memory_allocated"] else "-"
        lines.append(
            f"| {r['setting']} | {r['ema_bytes'] / mib:.2f} MiB | {r['ema_on'] or '-'} | "
            f"{r['ema_update_s_median'] * 1e3:.2f} / {r['ema_update_cpu_s_median'] * 1e3:.2f} ms | "
            f"{r['step_s_median']:.3f} | {r['step_cpu_s_median']:.3f} | "
            f"{r['peak_rss_bytes'] / mib:.0f} MiB | {cuda} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="demo-small", choices=("demo-tiny", "demo-small", "sana600m"))
    parser.add_argument("--rank", type=int, default=32)
    lever_child.step_arguments(parser, layers=4, layers_help="blocks of sana600m (the demos keep theirs)",
                               resolution=256, batch=2, steps=10, warmup=2, threads=2)
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the settings, interleaved")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--setting", default="plain", choices=SETTINGS, help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", default="off", help=argparse.SUPPRESS)  # lever_child passes it
    args = parser.parse_args()
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("--device cuda: no CUDA device here (the CPU figures: --device cpu)", file=sys.stderr)
            raise SystemExit(2)
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    for _ in range(args.repeats):
        for setting in SETTINGS:
            runs[setting].append(run_child(args, setting))
            print(f"{setting}: {runs[setting][-1]['step_s_median']:.3f} s/step", flush=True)
    rows = []
    for setting in SETTINGS:
        row = dict(runs[setting][0])
        for key in ("step_s", "step_cpu_s"):
            row[key] = [t for run in runs[setting] for t in run[key]]
            row[f"{key}_median"] = statistics.median(row[key])
        for key in ("ema_update_s_median", "ema_update_cpu_s_median"):
            row[key] = statistics.median(run[key] for run in runs[setting])
        row["peak_rss_bytes"] = max(run["peak_rss_bytes"] for run in runs[setting])
        row["repeat_medians"] = [run["step_s_median"] for run in runs[setting]]
        rows.append(row)
    result = {
        "benchmark": "ema",
        "model": f"Sana transformer, --model {args.model}" + (f", {args.layers} blocks" if args.model == "sana600m"
                                                              else "") + ", random weights",
        "device": args.device, "machine": machine_environment(child_environment()), "platform": platform.platform(),
        "settings": {k: getattr(args, k) for k in ("model", "layers", "resolution", "batch", "rank", "steps",
                                                    "warmup", "threads", "dtype", "repeats")},
        "load_average_before_after": [load_before, os.getloadavg()],
        "runs": rows, "markdown": markdown(rows),
    }
    print(result["markdown"])
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
