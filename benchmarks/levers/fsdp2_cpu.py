#!/usr/bin/env python
"""DDP against FSDP2 on 2 processes: memory per rank and step time (issue 35, points 3 and 5).

    HF_HUB_OFFLINE=1 python benchmarks/levers/fsdp2_cpu.py --out benchmarks/levers/fsdp2_cpu.json
    # the same script on GPUs (nccl; bf16 frozen base, fp32 LoRA masters, autocast), e.g. Sana 600M at full depth:
    python benchmarks/levers/fsdp2_cpu.py --device cuda --nproc 2 --layers 28 --resolution 1024 --batch 4 \\
        --out /tmp/fsdp2_gpu.json

The model: Sana 600M's transformer (diffusers' ``SanaTransformer2DModel`` from the catalogue's published config of
``Efficient-Large-Model/Sana_600M_1024px_diffusers``: 1152 wide, 16 heads x 72, caption 2304) cut to ``--layers``
blocks, random weights (seed 0, the same on every rank), LoRA rank 32 on ``to_q/to_k/to_v/to_out.0`` through
dit-lora's ``add_lora`` with fp32 masters, gradient checkpointing on. Each engine runs as ``--nproc`` processes
started by ``torch.distributed.run`` (gloo on a CPU, nccl on CUDA): DDP wraps the model in
``DistributedDataParallel``; FSDP2 shards it with dit-lora's own ``training.fsdp2.shard_model`` (each block, then the
root) and clips and gathers as a run does. Each rank then takes AdamW steps on its own random latents
(``--resolution`` / 32 per side) and 300 caption tokens, loss MSE against a random target.

Reported per engine and rank: the parameter and buffer bytes the rank holds (the frozen base included: what
sharding divides), the process's resident memory after the timed steps (``VmRSS``) and its peak (``VmHWM``; it
includes the whole model each rank builds before sharding it), on CUDA ``torch.cuda.max_memory_allocated`` over the
timed steps, the median step time and CPU time over ``--steps`` after ``--warmup``, and the losses (FSDP2's must
match DDP's within fp32 reduction error: the same seeds, the same data per rank). The ranks run with
``MALLOC_MMAP_THRESHOLD_=65536`` (every tensor its own mapping, returned when freed), so the resident memory after the
steps counts the tensors alive rather than what glibc's heap kept.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))
from benchmarks.common import lever_child  # noqa: E402
from benchmarks.common.cpu_harness import child_environment, machine_environment  # noqa: E402

HUB_ID = "Efficient-Large-Model/Sana_600M_1024px_diffusers"
BLOCKS = ("transformer_blocks",)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def build(args, device):
    """The transformer with LoRA (fp32 masters) and checkpointing, placed on ``device``."""
    import torch
    from diffusers import SanaTransformer2DModel

    from dit_lora.catalogue import by_hub_id
    from dit_lora.modeling.trainables import add_lora, cast_trainable_to_fp32

    config = {**by_hub_id(HUB_ID).configs["transformer/config.json"], "num_layers": args.layers}
    torch.manual_seed(0)
    model = SanaTransformer2DModel.from_config(config).to(args.dtype).requires_grad_(False).to(device)
    add_lora(model, rank=32, alpha=32, dropout=0.0, targets=("to_q", "to_k", "to_v", "to_out.0"), seed=0)
    cast_trainable_to_fp32(model, under_autocast=device.type == "cuda")
    model.enable_gradient_checkpointing()
    return model.train()


def held_bytes(model) -> int:
    """The parameter and buffer bytes this rank holds (a DTensor's local shard)."""
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def worker(args) -> None:
    """One rank of one engine: the figures of the module docstring, written to ``--result_dir``."""
    import torch
    import torch.distributed as dist

    cuda = args.device == "cuda"
    rank = int(os.environ["RANK"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(args.threads)
    dist.init_process_group("nccl" if cuda else "gloo")
    args.dtype = getattr(torch, args.dtype)
    model = build(args, device)
    sharded = None
    if args.engine == "fsdp2":
        from dit_lora.training.fsdp2 import shard

        sharded = shard(model, BLOCKS, device, train_backbone=False)
        wrapped = model
    else:
        wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    times, cpu_times, losses = [], [], []
    for i, batch in enumerate(lever_child.sana_batches(args, model, args.warmup + args.steps, seed=1 + rank, device=device)):
        if i == args.warmup and cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        with torch.autocast("cuda", dtype=args.dtype, enabled=cuda and args.dtype != torch.float32):
            out = wrapped(hidden_states=batch["hidden_states"], encoder_hidden_states=batch["encoder_hidden_states"],
                          timestep=batch["timestep"], return_dict=False)[0]
        loss = (out.float() - batch["target"]).pow(2).mean()
        loss.backward()
        if sharded is not None:
            sharded.clip(1.0)
        else:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
        losses.append(loss.item())
    result = {
        "engine": args.engine,
        "rank": rank,
        "held_bytes": held_bytes(model),
        "rss_after_steps_bytes": _status_kib("VmRSS") * 1024,
        "peak_rss_bytes": _status_kib("VmHWM") * 1024,
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated(device) if cuda else None,
        "step_s_median": statistics.median(times),
        "step_s": times,
        "step_cpu_s_median": statistics.median(cpu_times),
        "losses": losses,
    }
    # one file per rank: the ranks' stdout lines interleave
    (Path(args.result_dir) / f"{args.engine}_{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def run_engine(args, engine: str) -> list[dict]:
    """``--nproc`` ranks of ``engine`` under torch.distributed.run; their results, rank order."""
    import tempfile

    folder = tempfile.mkdtemp(prefix=f"fsdp2_cpu_{engine}_")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.nproc), "--master_port",
           str(args.port), str(Path(__file__).resolve()), "--worker", "--engine", engine, "--result_dir", folder]
    for key in ("device", "layers", "resolution", "batch", "steps", "warmup", "threads", "dtype"):
        cmd += [f"--{key}", str(getattr(args, key))]
    # A fixed mmap threshold: every tensor over 64 KiB is its own mapping, given back when freed, so the resident
    # figures are the tensors alive, not what glibc's heap kept of the whole model each rank built before sharding
    env = child_environment(OMP_NUM_THREADS=str(args.threads), MALLOC_MMAP_THRESHOLD_="65536")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{engine} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(path.read_text()) for path in Path(folder).glob(f"{engine}_*.json")]
    return sorted(rows, key=lambda r: r["rank"])


def markdown(rows: list[dict]) -> str:
    gib = 2**30
    lines = ["| engine | rank | weights held | RSS after steps | peak RSS | CUDA max allocated | step s (median) | "
             "step CPU s (median) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cuda = f"{r['cuda_max_memory_allocated'] / gib:.2f} GiB" if r["cuda_max_memory_allocated"] else "-"
        lines.append(
            f"| {r['engine']} | {r['rank']} | {r['held_bytes'] / gib:.3f} GiB | {r['rss_after_steps_bytes'] / gib:.2f} "
            f"GiB | {r['peak_rss_bytes'] / gib:.2f} GiB | {cuda} | {r['step_s_median']:.2f} | "
            f"{r['step_cpu_s_median']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    lever_child.step_arguments(parser, layers=4, resolution=256, batch=1, steps=3, warmup=1, threads=1)
    parser.add_argument("--port", type=int, default=29731)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="ddp", choices=("ddp", "fsdp2"), help=argparse.SUPPRESS)
    parser.add_argument("--result_dir", default=".", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    if args.worker:
        worker(args)
        return
    if args.device == "cuda":
        import torch

        if torch.cuda.device_count() < args.nproc:
            print(f"--device cuda: {args.nproc} GPUs needed, {torch.cuda.device_count()} here", file=sys.stderr)
            raise SystemExit(2)
    load_before = os.getloadavg()
    rows = run_engine(args, "ddp") + run_engine(args, "fsdp2")
    ddp_losses = [r["losses"] for r in rows if r["engine"] == "ddp"]
    fsdp_losses = [r["losses"] for r in rows if r["engine"] == "fsdp2"]
    worst = max(abs(a - b) for la, lb in zip(ddp_losses, fsdp_losses) for a, b in zip(la, lb))
    result = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": machine_environment(child_environment()),
        "platform": platform.platform(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "settings": {k: getattr(args, k) for k in ("device", "nproc", "layers", "resolution", "batch", "steps",
                                                    "warmup", "threads", "dtype")},
        "runs": rows,
        "max_loss_difference_ddp_fsdp2": worst,
        "table": markdown(rows),
    }
    print(result["table"])
    print(f"largest loss difference DDP vs FSDP2: {worst:.3g}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
