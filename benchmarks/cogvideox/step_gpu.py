#!/usr/bin/env python
"""GPU benchmark of dit-lora's CogVideoX LoRA train step on the real 2B / 5B (and 1.5-5B) architectures.

    python benchmarks/cogvideox/step_gpu.py --out benchmarks/cogvideox/step_gpu.json
    python benchmarks/cogvideox/step_gpu.py --models 5b --gradient_checkpointing on --steps 5

The setting of the issue and of the published figures: 49 x 480 x 720 (13 x 60 x 90 latents, 16
channels; 17,550 video tokens + 226 text tokens), batch 1, LoRA rank 64 (alpha 64) on
to_q/to_k/to_v/to_out.0, bf16 weights with fp32 LoRA masters, gradient checkpointing, precomputed
latents and T5 embeddings (no VAE, no T5 in memory: what ``--cache_latents`` gives the loop).

Each step is ``CogVideoXLoss.compute_loss`` (the spec's loss component) (uniform timesteps, v-prediction, x0 loss weighted
1/(1 - alphas_cumprod[t]), RoPE from the pipeline's own helper) plus backward, clipping and fused
AdamW, exactly as the training loop runs it (see ``benchmarks/common/gpu_step.py``). Weights are random
(``CogVideoXTransformer3DModel`` built from the published ``transformer/config.json`` values below),
which times the same kernels as the real checkpoints.

Published reference points (A100 80 GB, diffusers' CogVideoX LoRA example, same setting): peak
about 13 GB (2B) and 20-22 GB (5B). FLOP-bound floor on an H100 (issue 4): about 1.2 s (2B) and
3.1 s (5B) per step; the table reports measured / floor.

Without CUDA it exits with status 2 (``--smoke`` runs a 2-layer scaled-down model on CPU for two
steps to check the script, and reports no numbers).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.common.gpu_step import (build_bf16, device_line, env_info, finish, lora_updated, memory_fields, no_cuda_message,  # noqa: E402
                            prepare_lora, run_guarded, time_steps, train_step_fn)

_COMMON = {
    "attention_head_dim": 64, "in_channels": 16, "out_channels": 16, "flip_sin_to_cos": True, "freq_shift": 0,
    "time_embed_dim": 512, "text_embed_dim": 4096, "dropout": 0.0, "attention_bias": True, "sample_width": 90,
    "sample_height": 60, "sample_frames": 49, "patch_size": 2, "temporal_compression_ratio": 4,
    "max_text_seq_length": 226, "activation_fn": "gelu-approximate", "timestep_activation_fn": "silu",
    "norm_elementwise_affine": True, "norm_eps": 1e-5, "spatial_interpolation_scale": 1.875,
    "temporal_interpolation_scale": 1.0, "use_learned_positional_embeddings": False,
}
COGVIDEOX_CONFIGS = {
    "2b": {**_COMMON, "num_attention_heads": 30, "num_layers": 30, "use_rotary_positional_embeddings": False},
    "5b": {**_COMMON, "num_attention_heads": 48, "num_layers": 42, "use_rotary_positional_embeddings": True},
    "1.5-5b": {**_COMMON, "num_attention_heads": 48, "num_layers": 42, "use_rotary_positional_embeddings": True,
               "patch_size_t": 2, "patch_bias": False, "sample_height": 96, "sample_width": 170, "sample_frames": 81},
}
SNR_SHIFT = {"2b": 3.0, "5b": 1.0, "1.5-5b": 1.0}
FLOOR_S = {"2b": 1.2, "5b": 3.1}  # issue 4's FLOP-bound floor on an H100
PUBLISHED_PEAK_GB = {"2b": "~13", "5b": "20-22"}
SMOKE_CONFIG = {**COGVIDEOX_CONFIGS["5b"], "num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 16,
                "text_embed_dim": 32, "time_embed_dim": 16, "sample_height": 8, "sample_width": 8, "sample_frames": 9}
LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")


def scheduler_for(name: str):
    """``CogVideoXDDIMScheduler`` with the published configs' values."""
    from diffusers import CogVideoXDDIMScheduler

    return CogVideoXDDIMScheduler(
        num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
        clip_sample=False, set_alpha_to_one=True, steps_offset=0, prediction_type="v_prediction",
        rescale_betas_zero_snr=True, timestep_spacing="trailing", snr_shift_scale=SNR_SHIFT.get(name, 1.0),
    )


def run_config(name: str, config: dict, frames: int, height: int, width: int, checkpointing: bool, args, device,
               torch) -> dict:
    from diffusers import CogVideoXTransformer3DModel

    from dit_lora.config import TrainConfig
    from dit_lora.contract.family import Components
    from dit_lora.registry import get_family

    result = {"model": name, "frames": frames, "height": height, "width": width, "batch_size": 1,
              "gradient_checkpointing": checkpointing, "rank": args.rank}

    def body() -> None:
        model = build_bf16(CogVideoXTransformer3DModel, config, device, torch)  # bf16 build: fp32 would set the peak
        result["base_params"] = sum(p.numel() for p in model.parameters())
        cfg = TrainConfig(family="cogvideox", rank=args.rank, lora_alpha=args.rank, train_batch_size=1,
                          gradient_checkpointing=checkpointing, learning_rate=1e-4, max_grad_norm=1.0,
                          mixed_precision="bf16", max_num_frames=frames, height=height, width=width)
        optimizer, fused, params, result["lora_params"] = prepare_lora(model, cfg, LORA_TARGETS, checkpointing, device)
        result["fused_adamw"] = fused
        comps = Components(model=model, scheduler=scheduler_for(name))
        model.train()
        latent_frames = (frames - 1) // 4 + 1
        gen = torch.Generator(device=device).manual_seed(0)
        data = {
            "latents": torch.randn(1, latent_frames, config["in_channels"], height // 8, width // 8, device=device,
                                   generator=gen),
            "prompt_embeds": torch.randn(1, config["max_text_seq_length"], config["text_embed_dim"], device=device,
                                         generator=gen).to(torch.bfloat16),
        }
        step = train_step_fn(get_family("cogvideox").loss, comps, model, data, cfg, optimizer, fused, params, device, torch)
        result.update(time_steps(step, steps=args.steps, warmup_steps=args.warmup_steps, device=device, torch=torch))
        if name in FLOOR_S:
            result["floor_s"] = FLOOR_S[name]
            result["x_floor"] = round(result["median_s_per_step"] / FLOOR_S[name], 2)
        result["lora_updated"] = lora_updated(model)
        result.update(memory_fields(device, torch))

    return run_guarded(result, body, device, torch)


def markdown(rows: list[dict], env: dict) -> str:
    lines = [
        device_line(env),
        "",
        "| model | frames x H x W | grad. ckpt | s/step (median) | x floor | peak allocated (GiB) | peak reserved (GiB) | "
        "published peak (GB, A100) |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ckpt = "on" if r["gradient_checkpointing"] else "off"
        size = f"{r['frames']} x {r['height']} x {r['width']}"
        if r["status"] != "ok":
            lines.append(f"| CogVideoX {r['model']} | {size} | {ckpt} | {r['status']} | | | | |")
            continue
        lines.append(
            f"| CogVideoX {r['model']} | {size} | {ckpt} | {r['median_s_per_step']:.3f} | {r.get('x_floor', '')} | "
            f"{r.get('peak_allocated_gib', '')} | {r.get('peak_reserved_gib', '')} | "
            f"{PUBLISHED_PEAK_GB.get(r['model'], '')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "cogvideox" / "step_gpu.json"))
    ap.add_argument("--markdown", default=None, help="Also write the table to this file.")
    ap.add_argument("--models", default="2b,5b", help=f"Comma-separated subset of {','.join(COGVIDEOX_CONFIGS)}.")
    ap.add_argument("--frames", type=int, default=49)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=720)
    ap.add_argument("--gradient_checkpointing", default="on", choices=("both", "on", "off"))
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10, help="Timed steps per configuration.")
    ap.add_argument("--warmup_steps", type=int, default=3)
    ap.add_argument("--smoke", action="store_true",
                    help="No GPU needed: run a 2-layer scaled-down model on CPU for 2 steps to test this script.")
    args = ap.parse_args(argv)

    import torch

    if args.smoke:
        device = torch.device("cpu")
        models = {"smoke": SMOKE_CONFIG}
        frames, height, width = 9, 64, 64
        args.steps, args.warmup_steps = 2, 1
        args.rank = min(args.rank, 8)  # the scaled-down layers are narrower than a real rank (refused above them)
    else:
        if not torch.cuda.is_available():
            print(no_cuda_message("cogvideox/step_gpu.py", torch), file=sys.stderr)
            return 2
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True
        names = [m for m in args.models.split(",") if m]
        unknown = [m for m in names if m not in COGVIDEOX_CONFIGS]
        if unknown:
            ap.error(f"unknown model(s) {unknown}; choose from {sorted(COGVIDEOX_CONFIGS)}")
        models = {m: COGVIDEOX_CONFIGS[m] for m in names}
        frames, height, width = args.frames, args.height, args.width
    ckpts = {"both": [True, False], "on": [True], "off": [False]}[args.gradient_checkpointing]
    env = env_info(torch)
    print(f"device: {env.get('gpu', 'cpu (smoke test)')}, torch {env['torch']}", flush=True)
    rows = []
    for name, config in models.items():
        for ckpt in ckpts:
            print(f"CogVideoX {name}, {frames}x{height}x{width}, gradient checkpointing {'on' if ckpt else 'off'} ...",
                  flush=True)
            row = run_config(name, config, frames, height, width, ckpt, args, device, torch)
            rows.append(row)
            print(f"  {row['status']}: " + (f"{row['median_s_per_step']:.3f} s/step, peak "
                                             f"{row.get('peak_allocated_gib')} GiB" if row["status"] == "ok"
                                             else row.get("error", "")), flush=True)
    settings = {"frames": frames, "height": height, "width": width, "rank": args.rank, "targets": list(LORA_TARGETS),
                "steps": args.steps, "warmup_steps": args.warmup_steps,
                "configs": {m: COGVIDEOX_CONFIGS.get(m, SMOKE_CONFIG) for m in models}}
    return finish(rows, args, benchmark="cogvideox/step_gpu", env=env, settings=settings, table=markdown(rows, env))

if __name__ == "__main__":
    sys.exit(main())
