"""Shared parts of the GPU train-step benchmarks (``sana/step_gpu.py``, ``cogvideox/step_gpu.py``).

One timed step is exactly what dit-lora's training loop runs for a family on cached inputs:
``family.compute_loss`` under bf16 autocast, backward, total-norm clipping, the optimizer from
``dit_lora.training.optim.make_optimizer`` (fused AdamW with the non-finite skip handed to the
kernel, no host sync) and ``zero_grad(set_to_none=True)``. Times are CUDA events per step (plus one
wall-clock span for the whole block); memory is ``torch.cuda.max_memory_allocated`` /
``max_memory_reserved`` since the configuration started (model build included).
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from typing import Any


def env_info(torch) -> dict:
    """Library versions and the GPU's name, memory and capability (what RESULTS.md must name)."""
    import importlib.metadata as md

    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    for pkg in ("diffusers", "peft", "accelerate", "transformers"):
        try:
            info[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            info[pkg] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}", device_count=torch.cuda.device_count())
    return info


def prepare_lora(model, cfg, targets, checkpointing: bool, device):
    """LoRA (fp32 weights) on ``targets`` as the loop adds it; returns (optimizer, fused, params, lora_params)."""
    from dit_lora.modeling import trainables
    from dit_lora.training.optim import make_optimizer

    trainables.add_lora(model, rank=cfg.lora.rank, alpha=cfg.effective_lora_alpha, dropout=0.0, targets=targets, seed=0)
    trainables.cast_trainable_to_fp32(model, under_autocast=True)
    if checkpointing:
        model.enable_gradient_checkpointing()
    groups = trainables.build_param_groups(model, learning_rate=cfg.training.learning_rate, backbone_names=[],
                                         backbone_learning_rate=0.0, weight_decay=cfg.training.adam_weight_decay,
                                         loraplus_lr_ratio=None)
    optimizer, fused = make_optimizer(cfg.training, groups, device)
    params = [p for g in groups for p in g["params"]]
    return optimizer, fused, params, sum(p.numel() for p in params)


def build_bf16(model_class, config: dict, device, torch, *, fp32_buffers: tuple[str, ...] = ()):
    """``model_class(**config)`` made directly in bf16 on ``device``, frozen, in the dtypes diffusers'
    ``from_pretrained(torch_dtype=bfloat16)`` gives: ``_keep_in_fp32_modules`` parameters fp32, and the buffers
    whose names start with one of ``fp32_buffers`` (RoPE tables) fp32.

    Built in bf16 rather than fp32-then-cast: an fp32 build of a 5B model peaks at twice the bf16 weights, and
    the benchmarks reset the peak counter before the build, so that transient would be measured as the step's."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = model_class(**config)
    finally:
        torch.set_default_dtype(previous)
    keep = tuple(getattr(model, "_keep_in_fp32_modules", None) or ())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(k in name.split(".") for k in keep):
                p.data = p.data.float()
        for name, buf in model.named_buffers():
            if name.startswith(fp32_buffers) and fp32_buffers:
                owner_name, _, attr = name.rpartition(".")
                setattr(model.get_submodule(owner_name), attr, buf.float())
    model.requires_grad_(False)
    return model


def time_steps(step: Callable[[], Any], *, steps: int, warmup_steps: int, device, torch) -> dict:
    """Run ``warmup_steps`` then ``steps`` timed calls of ``step``; medians, means and the last loss."""
    cuda = device.type == "cuda"
    loss = None
    for _ in range(warmup_steps):
        loss = step()
    if cuda:
        torch.cuda.synchronize(device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)] if cuda else []
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)] if cuda else []
    cpu_times = []
    wall0 = time.perf_counter()
    for i in range(steps):
        if cuda:
            starts[i].record()
        t0 = time.perf_counter()
        loss = step()
        if cuda:
            ends[i].record()
        else:
            cpu_times.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - wall0
    times = [s.elapsed_time(e) / 1000.0 for s, e in zip(starts, ends)] if cuda else cpu_times
    med = statistics.median(times)
    return {"status": "ok", "timed_steps": steps, "warmup_steps": warmup_steps,
            "median_s_per_step": round(med, 5), "mean_s_per_step": round(wall / steps, 5),
            "steps_per_s": round(1.0 / med, 3), "final_loss": float(loss.detach().float().item())}


def train_step_fn(family, comps, model, data, cfg, optimizer, fused, params, device, torch) -> Callable[[], Any]:
    """One optimizer update of ``model`` on the fixed batch ``data``, as the training loop runs it."""
    step_gen = torch.Generator(device=device).manual_seed(1)
    ones = torch.ones((), device=device)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = family.compute_loss(comps, model, data, step_gen, cfg)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, cfg.training.max_grad_norm)
        if fused:  # what the training loop does: skip non-finite updates inside the kernel
            optimizer.found_inf = (~torch.isfinite(norm)).float()
            optimizer.grad_scale = ones
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def lora_updated(model) -> bool:
    """lora_B starts at zero: nonzero after the steps means gradients reached the trainables."""
    return bool(any(p.detach().abs().sum().item() > 0 for n, p in model.named_parameters() if "lora_B" in n))


def memory_fields(device, torch) -> dict:
    """Peak allocated / reserved GiB on CUDA (empty on CPU)."""
    if device.type != "cuda":
        return {}
    return {"peak_allocated_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved(device) / 2**30, 2)}


def run_guarded(result: dict, body: Callable[[], Any], device, torch) -> dict:
    """Fill ``result`` by ``body()`` with fresh peak-memory counters; an out-of-memory ends as status ``OOM``."""
    cuda = device.type == "cuda"
    try:
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        torch.manual_seed(0)
        body()
    except torch.cuda.OutOfMemoryError as err:
        result.update(status="OOM", error=str(err).splitlines()[0])
    finally:
        import gc

        gc.collect()  # the model and optimizer built by body() go before the next configuration
        if cuda:
            torch.cuda.empty_cache()
    return result


def device_line(env: dict) -> str:
    """The first line of a results table: which GPU and which versions measured it."""
    return (f"Device: {env.get('gpu')} ({env.get('gpu_memory_gib')} GiB), torch {env['torch']} (CUDA {env['cuda']}), "
            f"diffusers {env['diffusers']}, peft {env['peft']}.")


def no_cuda_message(script: str, torch) -> str:
    """Why a GPU benchmark measured nothing."""
    return (f"{script} needs a CUDA GPU and none is available (torch {torch.__version__}, CUDA build: "
            f"{torch.version.cuda}). Nothing was measured. Run it on a GPU machine, or pass --smoke to check the "
            "script on CPU.")


def finish(rows: list[dict], args, *, benchmark: str, env: dict, settings: dict, table: str) -> int:
    """Smoke runs: pass/fail only. Real runs: write ``args.out`` (JSON) and the table (``args.markdown``)."""
    import json
    from pathlib import Path

    if args.smoke:
        if not all(r["status"] == "ok" and r["lora_updated"] for r in rows):
            print("smoke test FAILED: " + json.dumps(rows), flush=True)
            return 1
        print("smoke test passed (no numbers recorded)")
        return 0
    results = {"benchmark": benchmark, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "environment": env,
               "settings": settings, "results": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    print("\n" + table + f"\n\nresults: {args.out}")
    return 0
