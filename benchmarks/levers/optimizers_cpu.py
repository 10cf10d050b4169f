#!/usr/bin/env python
"""CPU benchmark: the optimizers ``--optimizer`` offers, one update of a LoRA's weights, as the guard drives them.

    python benchmarks/levers/optimizers_cpu.py --threads 1 --out benchmarks/levers/optimizers_cpu.json

Parameters shaped as a LoRA (rank 16 and 32 on the attention projections: the Sana demo's ``small`` transformer,
320 wide, 5 blocks, 8 projections a block; and 40 blocks of a 3,072-wide model), fp32 (dit-lora's masters), random
gradients. Each optimizer steps with the guard's interface (``found_inf`` 0, a device learning rate where it takes
one); ``prodigyopt.Prodigy`` (diffusers' examples' optimizer, which reads its estimate on the host every step) is
timed beside dit-lora's device-side Prodigy, transformers' ``Adafactor`` (fixed learning rate, as the LoRA
trainers set it) beside dit-lora's device-side Adafactor, ``came_pytorch.CAME`` beside dit-lora's device-side
CAME, and torchao's own ``AdamW8bit``/``AdamW4bit`` (and bitsandbytes' ``AdamW8bit``, ``--use_8bit_adam``, where it
imports) beside dit-lora's ``--optimizer adamw8bit|adamw4bit`` (torchao's update with the guard's device-side skip),
for reference. Reported per optimizer: the median CPU time of one
update over ``--steps`` (after 3 warm-up updates), the state it keeps (bytes of its tensors) and that per trained
weight. ``--device cuda`` on a GPU: wall time of each update, the device synchronised around it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from pathlib import Path

import torch

#: (name, rank, width, blocks, projections a block)
SHAPES = [("sana-small r16", 16, 320, 5, 8), ("3072-wide x40 r32", 32, 3072, 40, 4)]


def lora_params(rank: int, width: int, blocks: int, projections: int, device: str = "cpu") -> list:
    """A and B of every adapted projection, random (B too: a LoRA past its first update), on ``device``."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(blocks * projections):
        out.append(torch.nn.Parameter((torch.randn(rank, width, generator=g) * 0.01).to(device)))
        out.append(torch.nn.Parameter((torch.randn(width, rank, generator=g) * 0.01).to(device)))
    return out


def make(name: str, params, device: str = "cpu"):
    """The optimizer as dit-lora builds it (training/optim.py), and whether the guard skips it on the device."""
    if name == "adamw (fused)":
        return torch.optim.AdamW(params, lr=torch.tensor(1e-4, device=device), fused=True, weight_decay=1e-4), True
    if name == "prodigy (dit-lora)":
        from dit_lora.training.prodigy import DeviceProdigy

        opt = DeviceProdigy(params, lr=1.0, weight_decay=1e-4, use_bias_correction=True, safeguard_warmup=True)
        for group in opt.param_groups:
            group["lr"] = torch.tensor(1.0, device=device)  # the guard's device learning rate
        return opt, True
    if name == "adafactor (dit-lora)":
        from dit_lora.training.adafactor import DeviceAdafactor

        opt = DeviceAdafactor(params, lr=1e-4, weight_decay=1e-4)
        for group in opt.param_groups:
            group["lr"] = torch.tensor(1e-4, device=device)
        return opt, True
    if name == "came (dit-lora)":
        from dit_lora.training.came import DeviceCAME

        opt = DeviceCAME(params, lr=1e-4, weight_decay=1e-4)
        for group in opt.param_groups:
            group["lr"] = torch.tensor(1e-4, device=device)
        return opt, True
    if name == "came (came-pytorch)":
        from came_pytorch import CAME

        return CAME(params, lr=1e-4, weight_decay=1e-4), False
    if name.startswith(("adamw8bit", "adamw4bit")):
        return low_bit(name, params)
    if name == "adafactor (transformers)":
        from transformers.optimization import Adafactor

        adafactor = dict(relative_step=False, warmup_init=False, scale_parameter=False)
        return Adafactor(params, lr=1e-4, weight_decay=1e-4, **adafactor), False
    import prodigyopt

    return prodigyopt.Prodigy(params, lr=1.0, weight_decay=1e-4, use_bias_correction=True, safeguard_warmup=True), False


def low_bit(name: str, params):
    """``adamw8bit``/``adamw4bit`` as dit-lora builds them (``(dit-lora)``: skipped by the guard on the device, its
    learning rate the guard's device tensor), torchao's own class, or bitsandbytes' 8-bit AdamW."""
    options = dict(lr=1e-4, weight_decay=1e-4)
    bits = 8 if name.startswith("adamw8bit") else 4
    if name.endswith("(dit-lora)"):
        from dit_lora.training.lowbit_adam import device_adamw

        return device_adamw(bits, params, **options), True
    if name.endswith("(bitsandbytes)"):
        import bitsandbytes

        return bitsandbytes.optim.AdamW8bit(params, **options), False
    from dit_lora.training.lowbit_adam import torchao_optimizers

    return torchao_optimizers()[bits == 4](params, **options), False


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes ``t`` holds: a tensor subclass's (torchao's quantized moments) those of its inner tensors."""
    if type(t) is not torch.Tensor and hasattr(t, "__tensor_flatten__"):
        return sum(tensor_bytes(getattr(t, name)) for name in t.__tensor_flatten__()[0])
    return t.numel() * t.element_size()


def state_bytes(opt) -> int:
    """Bytes of the tensors the optimizer keeps (per-parameter state and the groups' own)."""
    total = sum(tensor_bytes(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    groups = (v for g in opt.param_groups for k, v in g.items() if k != "params" and torch.is_tensor(v))
    return total + sum(tensor_bytes(v) for v in groups)


def time_updates(name: str, shape, steps: int, device: str = "cpu") -> dict:
    """Median seconds of one update (CPU time; on a GPU wall time, synchronised), and the state, of optimizer
    ``name`` on the LoRA ``shape``."""
    params = lora_params(*shape[1:], device=device)
    opt, device_skip = make(name, params, device)
    g = torch.Generator().manual_seed(1)
    grads = [[(torch.randn(p.shape, generator=g) * 1e-3).to(device) for p in params] for _ in range(4)]
    cuda = device.startswith("cuda")
    clock = time.perf_counter if cuda else time.process_time
    times = []
    for step in range(3 + steps):
        for p, grad in zip(params, grads[step % 4]):
            p.grad = grad
        if device_skip:
            opt.found_inf = torch.zeros((), device=device)
            opt.grad_scale = torch.ones((), device=device)
        if cuda:
            torch.cuda.synchronize()
        start = clock()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if step >= 3:
            times.append(clock() - start)
    weights = sum(p.numel() for p in params)
    return {"optimizer": name, "shape": shape[0], "trained_weights": weights, "step_cpu_s": statistics.median(times),
            "state_bytes": state_bytes(opt), "state_bytes_per_weight": state_bytes(opt) / weights}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU (wall time, synchronised)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = ["adamw (fused)", "prodigy (dit-lora)", "adafactor (dit-lora)", "adafactor (transformers)",
             "came (dit-lora)"]
    optional = (
        ("prodigyopt", ["prodigy (prodigyopt)"]),  # the references: the dev extra here; .whl/ on a lent GPU machine
        ("came_pytorch", ["came (came-pytorch)"]),
        ("torchao", ["adamw8bit (dit-lora)", "adamw8bit (torchao)", "adamw4bit (dit-lora)", "adamw4bit (torchao)"]),
        ("bitsandbytes", ["adamw8bit (bitsandbytes)"]),  # torchao and bitsandbytes: the quant (and dev) extra
    )
    for package, rows_of_package in optional:
        try:
            importlib.import_module(package)
            names += rows_of_package
        except ImportError:
            print(f"{package} is not installed: {', '.join(rows_of_package)} left out")
    rows = [time_updates(name, shape, args.steps, args.device) for shape in SHAPES for name in names]
    base = {r["shape"]: r["step_cpu_s"] for r in rows if r["optimizer"] == "adamw (fused)"}
    print("| weights | optimizer | step CPU ms | vs AdamW | state | bytes/weight |\n|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['shape']} ({r['trained_weights']:,}) | {r['optimizer']} | {1000 * r['step_cpu_s']:.2f} | "
              f"{r['step_cpu_s'] / base[r['shape']]:.2f}x | {r['state_bytes'] / 2**20:.1f} MiB | "
              f"{r['state_bytes_per_weight']:.0f} |")
    if args.out:
        from importlib.metadata import PackageNotFoundError, version

        meta = {"torch": torch.__version__, "threads": args.threads, "steps": args.steps, "device": args.device}
        for dist in ("prodigyopt", "came-pytorch", "torchao", "bitsandbytes"):
            try:
                meta[dist] = version(dist)
            except PackageNotFoundError:
                pass
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
