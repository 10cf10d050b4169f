#!/usr/bin/env python
"""How much resident memory a CPU training step takes beyond the live bytes the memory plan counts.

    HF_HUB_OFFLINE=1 python benchmarks/plan/cpu_heap_factor.py --out benchmarks/plan/cpu_heap_factor.json

On a CPU a run's peak is its resident set, and glibc's heap does not hand a step's freed activations back
in a reusable shape: the small allocations every operator makes (tensor headers, autograd nodes) land in
the holes big freed tensors leave, so the next big tensor of the same size no longer fits there and the
heap grows instead. A training step therefore touches more pages than its live peak. This script
measures the ratios the planner uses (``dit_lora.plan.estimate.CPU_HEAP_FACTOR``, without and with
activation checkpointing), on the transformer
alone, apart from the recipe runs that ``plan/vs_cpu_runs.py`` checks the plan against: per case it loads
a reduced-depth, real-width transformer (the folders ``plan/vs_cpu_runs.py --build_only`` builds), adds
LoRA (rank 4 on the attention projections, fp32), applies the recipe's host-memory settings
(``--cpu_reuse_memory``), pages every weight in, and runs ``--steps`` forward + backward passes. Each step
records the live bytes its operators keep (:class:`dit_lora.plan.fake.LiveBytes` on the real tensors: the
quantity the plan predicts) and the resident peak so far above the resident size before the first step
(``VmHWM``, reset once through ``/proc/self/clear_refs``: the heap one step leaves is where the next starts).
The factor of a case is that growth after the last step over the largest live peak.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.plan.vs_cpu_runs import environment, model_folder  # noqa: E402

MIB = 2**20
#: name -> (model key of vs_cpu_runs.py, batch, checkpointing, autocast dtype or None, resolution or frames)
CASES = {
    "sana-512-b1": ("sana600m-2l", 1, False, None, 512),
    "sana-512-b4": ("sana600m-2l", 4, False, None, 512),
    "sana-512-b4-gc": ("sana600m-2l", 4, True, None, 512),
    "sana-1024-b1-gc": ("sana600m-2l", 1, True, None, 1024),
    "sana-512-b2-bf16": ("sana600m-2l", 2, False, torch.bfloat16, 512),
    "sana-512-b8-gc": ("sana600m-2l", 8, True, None, 512),
    "dit-256-b8": ("dit-xl-256-2l", 8, False, None, 256),
    "dit-256-b16": ("dit-xl-256-2l", 16, False, None, 256),
    "dit-256-b16-gc": ("dit-xl-256-2l", 16, True, None, 256),
    "dit-256-b8-gc": ("dit-xl-256-2l", 8, True, None, 256),
    "cogvideox5b-9x256x256": ("cogvideox-5b-1l", 1, False, None, 9),
}


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _model_and_inputs(key: str, batch: int, size: int, work: Path):
    from diffusers import CogVideoXTransformer3DModel, DiTTransformer2DModel, SanaTransformer2DModel

    folder = model_folder(work, key) / "transformer"
    if key.startswith("sana"):
        model = SanaTransformer2DModel.from_pretrained(folder)
        side = size // 32  # DC-AE's stride
        inputs = dict(hidden_states=torch.randn(batch, model.config.in_channels, side, side),
                      encoder_hidden_states=torch.randn(batch, 16, model.config.caption_channels),
                      encoder_attention_mask=torch.ones(batch, 16), timestep=torch.rand(batch) * 1000)
    elif key.startswith("dit"):
        model = DiTTransformer2DModel.from_pretrained(folder)
        side = size // 8
        inputs = dict(hidden_states=torch.randn(batch, model.config.in_channels, side, side),
                      class_labels=torch.randint(0, 1000, (batch,)), timestep=torch.randint(0, 1000, (batch,)))
    else:
        model = CogVideoXTransformer3DModel.from_pretrained(folder)
        frames = (size - 1) // 4 + 1  # the VAE's 4x temporal stride
        inputs = dict(hidden_states=torch.randn(batch, frames, model.config.in_channels, 32, 32),
                      encoder_hidden_states=torch.randn(batch, 226, model.config.text_embed_dim),
                      timestep=torch.randint(0, 1000, (batch,)))
    return model, inputs


def measure(name: str, work: Path, steps: int) -> dict:
    """One case in this process: per step the live peak and the resident growth so far; the case's factor."""
    from peft import LoraConfig, inject_adapter_in_model

    from dit_lora.plan.fake import LiveBytes
    from dit_lora.training import host_memory

    key, batch, checkpointing, dtype, size = CASES[name]
    model, inputs = _model_and_inputs(key, batch, size, work)
    model.requires_grad_(False)
    inject_adapter_in_model(LoraConfig(r=4, lora_alpha=4, target_modules=["to_q", "to_k", "to_v", "to_out.0"]), model)
    for n, p in model.named_parameters():
        if "lora" in n:
            p.data = p.data.float()  # the recipes' fp32 LoRA masters
    if checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    for t in (*model.parameters(), *model.buffers()):
        t.data.sum()  # page in the memory-mapped weights: the plan counts them apart
    host_memory.release_freed_memory()
    host_memory.reuse_freed_memory()
    rows = []
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS, once: the heap a step leaves is where the next one starts
    for _ in range(steps):
        live = LiveBytes()
        start = time.perf_counter()
        with live, torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(**inputs, return_dict=False)[0]
            (out.float() ** 2).mean().backward()
        del out
        model.zero_grad(set_to_none=True)
        rows.append({"live_peak_bytes": live.peak, "resident_growth_bytes": _status("VmHWM") - before,
                     "step_s": time.perf_counter() - start})
    factor = rows[-1]["resident_growth_bytes"] / max(r["live_peak_bytes"] for r in rows)
    return {"case": name, "model": key, "batch": batch, "checkpointing": checkpointing,
            "dtype": str(dtype or torch.float32), "size": size, "steps": rows, "factor": factor}


def main(argv: list[str] | None = None) -> int:
    """Every case in a fresh child process; print the factors and their medians, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    ap.add_argument("--work_dir", default="/tmp/dit-lora-plan-validation",
                    help="where plan/vs_cpu_runs.py --build_only put the model folders")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--out", help="JSON results file")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one case in this process
    args = ap.parse_args(argv)
    work = Path(args.work_dir)
    if args.one:
        print(json.dumps(measure(args.one, work, args.steps)))
        return 0
    import subprocess

    rows = []
    for name in args.cases.split(","):  # a fresh process per case: the heap's history is part of what is measured
        proc = subprocess.run([sys.executable, __file__, "--one", name, "--work_dir", str(work), "--steps",
                               str(args.steps)], capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            return 1
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        last = row["steps"][-1]
        print(f"{name:24s} live peak {last['live_peak_bytes'] / MIB:7.0f} MiB  resident growth "
              f"{max(r['resident_growth_bytes'] for r in row['steps']) / MIB:7.0f} MiB  factor {row['factor']:.2f}")
    for checkpointing in (False, True):
        factors = [r["factor"] for r in rows if r["checkpointing"] == checkpointing]
        if factors:
            print(f"{'with' if checkpointing else 'without'} checkpointing: {len(factors)} cases, factor min "
                  f"{min(factors):.2f}, median {statistics.median(factors):.2f}, max {max(factors):.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
