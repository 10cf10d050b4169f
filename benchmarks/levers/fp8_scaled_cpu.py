#!/usr/bin/env python
"""``--quantize_base fp8_scaled`` against ``none`` on a real-width Wan block stack: the transformer's weight bytes,
the plan's prediction of them, peak memory and step time (issue 35, points 1 and 5).

    HF_HUB_OFFLINE=1 python benchmarks/levers/fp8_scaled_cpu.py --threads 1 --out benchmarks/levers/fp8_scaled_cpu.json
    HF_HUB_OFFLINE=1 python benchmarks/levers/fp8_scaled_cpu.py --threads 1 --model wan14b --layers 1 --steps 3 \\
        --out benchmarks/levers/fp8_scaled_cpu_14b.json
    # the same script on a GPU (bf16 weights, fp32 LoRA masters, bf16 autocast), Wan 2.1 14B at 81 x 480 x 832:
    python benchmarks/levers/fp8_scaled_cpu.py --device cuda --model wan14b --layers 40 --frames 21 --height 60 \\
        --width 104 --text_tokens 512 --out benchmarks/levers/fp8_scaled_gpu.json

The model: diffusers' ``WanTransformer3DModel`` from the catalogue's published config (``--model wan1.3b``: Wan 2.1
T2V 1.3B, 1536 wide, 12 heads x 128, FFN 8960; ``wan14b``: 14B, 5120 wide, 40 heads, FFN 13824) cut to
``--layers`` blocks, random weights (seed 0, built directly in the weight dtype: fp32 on a CPU, which has no fast
bf16, bf16 on CUDA). Each scheme runs in a fresh child process, in the order a run takes: built (the load), converted
by ``quantize.after_loading`` (fp8_scaled; the same Linears the plan counts), moved to the device, LoRA rank 16 on
the family's default layers through dit-lora's ``add_lora`` with fp32 masters, diffusers' gradient checkpointing
(``--checkpointing``, Wan's default on), then AdamW steps on random latents (``--frames`` x ``--height`` x
``--width`` latent positions, 16 channels) and ``--text_tokens`` UMT5-width tokens, loss MSE against a random target.
On a CPU the steps run with the host-memory settings a CPU run's training uses (``--cpu_reuse_memory``, the default:
glibc's heap kept between steps); with glibc's defaults the fp8 run's peak varied by 0.5 GiB between identical runs.

Reported per scheme: the transformer's weight bytes (parameters and buffers) after conversion and the memory plan's
prediction of them (``quantize.quantized_weight_savings`` on the unconverted model, as ``plan/estimate.py`` counts);
the conversion time; the median step CPU time (``time.process_time``: what a step costs, whatever else the machine
runs) and wall time over ``--steps`` timed steps after ``--warmup``; memory: on a CPU the
process's resident set after conversion and its peak during the timed steps (``VmHWM`` reset through
``/proc/self/clear_refs`` before them, so the build's own peak does not count), on CUDA
``torch.cuda.memory_allocated`` after placement and ``max_memory_allocated`` over the timed steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))
from benchmarks.common import lever_child  # noqa: E402
from benchmarks.common.cpu_harness import child_environment, machine_environment  # noqa: E402
from benchmarks.common.lever_child import train_steps  # noqa: E402

MODELS = {"wan1.3b": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "wan14b": "Wan-AI/Wan2.1-T2V-14B-Diffusers"}
SCHEMES = ("none", "fp8_scaled")


def _status(key: str) -> int | None:
    """``VmRSS`` / ``VmHWM`` of this process in bytes (None off Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux: ``5`` to ``/proc/self/clear_refs``); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def build(args):
    """The transformer as a run loads it under ``args.scheme``: (model, plan's predicted weight bytes, convert s)."""
    import torch
    from diffusers import WanTransformer3DModel

    from dit_lora.catalogue import by_hub_id
    from dit_lora.config import TrainConfig
    from dit_lora.modeling import quantize
    from dit_lora.plan.fake import module_bytes

    config = {**by_hub_id(MODELS[args.model]).configs["transformer/config.json"], "num_layers": args.layers}
    previous = torch.get_default_dtype()
    torch.set_default_dtype(args.dtype)  # a 14B-wide block never exists in fp32 when bf16 is asked for
    try:
        torch.manual_seed(0)
        model = WanTransformer3DModel.from_config(config).requires_grad_(False)
    finally:
        torch.set_default_dtype(previous)
    names = quantize.quantized_linears(model)
    predicted = module_bytes(model) - (quantize.quantized_weight_savings(model, args.scheme, names)
                                       if args.scheme != "none" else 0)
    cfg = TrainConfig.for_family("wan", quantize_base=args.scheme)
    start = time.perf_counter()
    quantize.after_loading(cfg.model, model, (), torch.device(args.device))
    return model, predicted, time.perf_counter() - start


def batches(args, model, steps: int):
    """``steps`` random batches (seed 1), the same in every run."""
    import torch

    g = torch.Generator().manual_seed(1)
    c = model.config
    out = []
    for _ in range(steps):
        latents = torch.randn(args.batch, c.in_channels, args.frames, args.height, args.width, generator=g)
        out.append({
            "hidden_states": latents.to(args.device, args.dtype),
            "encoder_hidden_states": torch.randn(args.batch, args.text_tokens, c.text_dim, generator=g).to(
                args.device, args.dtype),
            "timestep": torch.rand(args.batch, generator=g).mul(1000).to(args.device),
            "target": torch.randn(latents.shape, generator=g).to(args.device),
        })
    return out


def child(args) -> dict:
    """One run of ``--scheme``: the figures of the module docstring."""
    import torch

    from dit_lora.modeling.trainables import add_lora, cast_trainable_to_fp32
    from dit_lora.plan.fake import module_bytes
    from dit_lora.registry import get_spec
    from dit_lora.training.host_memory import release_freed_memory, reuse_freed_memory

    torch.set_num_threads(args.threads)
    args.dtype = getattr(torch, args.dtype)
    cuda = args.device == "cuda"
    model, predicted, convert_s = build(args)
    weights = module_bytes(model)
    model.to(args.device)
    rss_loaded = _status("VmRSS")
    allocated = torch.cuda.memory_allocated() if cuda else None
    add_lora(model, rank=16, alpha=16, dropout=0.0, targets=get_spec("wan").info.default_lora_layers, seed=0)
    cast_trainable_to_fp32(model, under_autocast=cuda)
    if args.checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    if not cuda:  # as a CPU run's training starts (--cpu_reuse_memory, the default): glibc's heap kept for reuse
        release_freed_memory()
        reuse_freed_memory()
    peak: dict[str, bool] = {}
    steps = train_steps(
        model,
        batches(args, model, args.warmup + args.steps),
        args,
        measured_start=lambda: peak.update(reset=_reset_peak()),
    )
    times, cpu_times, losses, peak_reset = steps.times, steps.cpu_times, steps.losses, peak.get("reset", False)
    return {
        "scheme": args.scheme,
        "weight_bytes": weights,
        "plan_weight_bytes": predicted,
        "convert_s": convert_s,
        "step_s_median": statistics.median(times),
        "step_s": times,
        "step_cpu_s_median": statistics.median(cpu_times),
        "step_cpu_s": cpu_times,
        "losses": losses,
        "rss_after_load_bytes": rss_loaded,
        "peak_rss_steps_bytes": _status("VmHWM") if peak_reset else None,
        "cuda_allocated_after_load": allocated,
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else None,
    }


def run_child(args, scheme: str) -> dict:
    keys = ("device", "model", "layers", "frames", "height", "width", "text_tokens", "batch", "steps", "warmup",
            "threads", "dtype")
    return lever_child.run_child(__file__, args, keys, ["--scheme", scheme], scheme)


def markdown(rows: list[dict]) -> str:
    mib = 2**20

    def size(n):
        return "-" if n is None else f"{n / mib:,.0f} MiB"

    lines = ["| `--quantize_base` | transformer weights | plan's prediction | convert s | step CPU s (median) | "
             "step wall s (median) | RSS after load | peak RSS, steps | CUDA after load | CUDA max, steps |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['scheme']} | {size(r['weight_bytes'])} | {size(r['plan_weight_bytes'])} | "
                     f"{r['convert_s']:.2f} | {r['step_cpu_s_median']:.2f} | {r['step_s_median']:.2f} | "
                     f"{size(r['rss_after_load_bytes'])} | "
                     f"{size(r['peak_rss_steps_bytes'])} | {size(r['cuda_allocated_after_load'])} | "
                     f"{size(r['cuda_max_memory_allocated'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="wan1.3b", choices=sorted(MODELS))
    parser.add_argument("--frames", type=int, default=3, help="latent frames (81 video frames are 21)")
    parser.add_argument("--height", type=int, default=16, help="latent rows (480 px is 60)")
    parser.add_argument("--width", type=int, default=16, help="latent columns (832 px is 104)")
    parser.add_argument("--text_tokens", type=int, default=64)
    lever_child.step_arguments(parser, layers=4, batch=1, steps=4, warmup=1, threads=2)
    parser.add_argument("--checkpointing", default="on", choices=("on", "off"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scheme", default="none", choices=SCHEMES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.checkpointing = args.checkpointing == "on"
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    if args.child:
        print(json.dumps(child(args)))
        return
    rows = [run_child(args, scheme) for scheme in SCHEMES]
    settings = {k: getattr(args, k) for k in ("device", "model", "layers", "frames", "height", "width", "text_tokens",
                                              "batch", "steps", "warmup", "threads", "dtype", "checkpointing")}
    env = machine_environment(child_environment())
    if args.device == "cuda":
        import torch

        from benchmarks.common.gpu_step import env_info

        env = {**env, **env_info(torch)}
    table = markdown(rows)
    print(table)
    if args.out:
        args.out.write_text(json.dumps({"benchmark": "fp8_scaled_cpu", "settings": settings, "environment": env,
                                        "rows": rows, "table": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
