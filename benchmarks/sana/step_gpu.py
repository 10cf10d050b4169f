#!/usr/bin/env python
"""GPU benchmark of dit-lora's Sana LoRA train step on the real Sana 600M / 1.6B architectures.

    python benchmarks/sana/step_gpu.py --out benchmarks/sana/step_gpu.json
    python benchmarks/sana/step_gpu.py --models 1600M --batch_sizes 4 --gradient_checkpointing on

What is measured: only the transformer train step, as dit-lora's training loop runs it, on
synthetic *cached* inputs (no VAE, no text encoder, no data loading):

* ``SanaTransformer2DModel`` built from the real configs below with random weights, stored in bf16
  (as dit-lora loads the ``*_BF16_diffusers`` repos), frozen;
* LoRA rank ``--rank`` (default 32, alpha = rank) on to_q, to_k, to_v, to_out.0 via
  ``dit_lora.modeling.trainables.add_lora`` and fp32 LoRA weights (``cast_trainable_to_fp32``);
* latents ``[B, 32, res/32, res/32]`` (DC-AE f32c32) and 300-token caption embeddings
  ``[B, 300, 2304]`` (Gemma-2-2B width) with a padding mask;
* per step: ``SanaLoss.compute_loss`` (logit-normal timesteps, flow-matching loss) under bf16
  autocast, backward, total-norm clipping at 1.0, the optimizer from
  ``dit_lora.training.optim.make_optimizer`` (fused AdamW) with the non-finite-gradient skip
  handed to the fused kernel (no host sync), ``zero_grad(set_to_none=True)``.

Reported per (model, batch size, gradient checkpointing): median and mean step time over
``--steps`` timed steps after ``--warmup_steps`` (CUDA events per step, plus one wall-clock span
for the whole block), steps/s, images/s, ``torch.cuda.max_memory_allocated`` and
``max_memory_reserved`` (peak, reset per configuration), or ``OOM``.

Without CUDA it exits with status 2 and a message (``--smoke`` instead runs a 2-layer
scaled-down model on CPU for two steps, to check the script itself, and reports no numbers).

Architectures: diffusers ``scripts/convert_sana_to_diffusers.py`` (``model_kwargs`` for
``SanaMS_600M_P1_D28`` / ``SanaMS_1600M_P1_D20`` plus its common ``transformer_kwargs``), which is
what ``Efficient-Large-Model/Sana_{600M,1600M}_1024px_BF16_diffusers`` ship as
``transformer/config.json`` (Sana 1.0: no qk-norm, no guidance embedding).
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
    "in_channels": 32,
    "out_channels": 32,
    "caption_channels": 2304,
    "mlp_ratio": 2.5,
    "attention_bias": False,
    "patch_size": 1,
    "norm_elementwise_affine": False,
    "norm_eps": 1e-6,
    "interpolation_scale": None,  # None at 512 / 1024 px
}
SANA_CONFIGS = {
    "600M": {
        **_COMMON,
        "num_layers": 28,
        "num_attention_heads": 36,
        "attention_head_dim": 32,  # model width 1152
        "num_cross_attention_heads": 16,
        "cross_attention_head_dim": 72,
        "cross_attention_dim": 1152,
    },
    "1600M": {
        **_COMMON,
        "num_layers": 20,
        "num_attention_heads": 70,
        "attention_head_dim": 32,  # model width 2240
        "num_cross_attention_heads": 20,
        "cross_attention_head_dim": 112,
        "cross_attention_dim": 2240,
    },
}
SMOKE_CONFIG = {**SANA_CONFIGS["600M"], "num_layers": 2, "num_attention_heads": 4, "num_cross_attention_heads": 2,
                "cross_attention_head_dim": 64, "cross_attention_dim": 128, "caption_channels": 64}
DC_AE_STRIDE = 32
TEXT_TOKENS = 300
LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")


def build_model(config: dict, device, torch):
    """Random-weight SanaTransformer2DModel made directly in bf16 on ``device`` (an fp32 build would set the peak)."""
    from diffusers import SanaTransformer2DModel

    return build_bf16(SanaTransformer2DModel, {**config, "sample_size": 32}, device, torch)


def run_config(name: str, config: dict, batch: int, resolution: int, checkpointing: bool, args, device, torch) -> dict:
    from dit_lora.config import TrainConfig
    from dit_lora.contract.family import Components
    from dit_lora.modeling.flow_matching import training_scheduler
    from dit_lora.registry import get_spec

    result = {"model": name, "batch_size": batch, "resolution": resolution, "gradient_checkpointing": checkpointing,
              "rank": args.rank, "lora_targets": list(LORA_TARGETS)}

    def body() -> None:
        model = build_model(config, device, torch)
        result["base_params"] = sum(p.numel() for p in model.parameters())
        cfg = TrainConfig.for_family("sana", rank=args.rank, lora_alpha=args.rank, train_batch_size=batch,
                                     resolution=resolution, gradient_checkpointing=checkpointing, learning_rate=1e-4,
                                     max_grad_norm=1.0, weighting_scheme="logit_normal", mixed_precision="bf16")
        optimizer, fused, params, result["lora_params"] = prepare_lora(model, cfg, LORA_TARGETS, checkpointing, device)
        result["fused_adamw"] = fused
        comps = Components(model=model, scheduler=training_scheduler({"flow_shift": 3.0}))
        model.train()
        side = resolution // DC_AE_STRIDE
        gen = torch.Generator(device=device).manual_seed(0)
        latents = torch.randn(batch, config["in_channels"], side, side, device=device, generator=gen)
        embeds = torch.randn(batch, TEXT_TOKENS, config["caption_channels"], device=device, generator=gen).to(torch.bfloat16)
        lengths = torch.randint(8, TEXT_TOKENS + 1, (batch,), device=device, generator=gen)
        mask = (torch.arange(TEXT_TOKENS, device=device)[None] < lengths[:, None]).long()
        data = {"latents": latents, "prompt_embeds": embeds, "prompt_attention_mask": mask}
        step = train_step_fn(get_spec("sana").loss, comps, model, data, cfg, optimizer, fused, params, device, torch)
        result.update(time_steps(step, steps=args.steps, warmup_steps=args.warmup_steps, device=device, torch=torch))
        result["images_per_s"] = round(batch / result["median_s_per_step"], 2)
        result["lora_updated"] = lora_updated(model)
        result.update(memory_fields(device, torch))

    return run_guarded(result, body, device, torch)


def markdown(rows: list[dict], env: dict) -> str:
    lines = [
        device_line(env),
        "",
        "| model | batch | grad. ckpt | steps/s | s/step (median) | s/step (mean) | images/s | peak allocated (GiB) | "
        "peak reserved (GiB) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ckpt = "on" if r["gradient_checkpointing"] else "off"
        if r["status"] != "ok":
            lines.append(f"| Sana {r['model']} | {r['batch_size']} | {ckpt} | {r['status']} | | | | | |")
            continue
        lines.append(
            f"| Sana {r['model']} | {r['batch_size']} | {ckpt} | {r['steps_per_s']:.2f} | {r['median_s_per_step']:.4f} | "
            f"{r['mean_s_per_step']:.4f} | {r['images_per_s']:.1f} | {r.get('peak_allocated_gib', '')} | "
            f"{r.get('peak_reserved_gib', '')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "sana" / "step_gpu.json"))
    ap.add_argument("--markdown", default=None, help="Also write the table to this file.")
    ap.add_argument("--models", default="600M,1600M", help="Comma-separated subset of 600M,1600M.")
    ap.add_argument("--batch_sizes", default="4,16")
    ap.add_argument("--gradient_checkpointing", default="both", choices=("both", "on", "off"))
    ap.add_argument("--resolution", type=int, default=1024, help="Pixels; latents are resolution/32 on a side.")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20, help="Timed steps per configuration.")
    ap.add_argument("--warmup_steps", type=int, default=5)
    ap.add_argument("--smoke", action="store_true",
                    help="No GPU needed: run a 2-layer scaled-down model on CPU for 2 steps to test this script.")
    args = ap.parse_args(argv)

    import torch

    if args.resolution % DC_AE_STRIDE:
        ap.error(f"--resolution must be a multiple of {DC_AE_STRIDE} (the DC-AE stride)")
    if args.smoke:
        device = torch.device("cpu")
        models = {"smoke": SMOKE_CONFIG}
        batches, res = [2], 64
        args.steps, args.warmup_steps = 2, 1
    else:
        if not torch.cuda.is_available():
            print(no_cuda_message("sana/step_gpu.py", torch), file=sys.stderr)
            return 2
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True  # what dit-lora's --allow_tf32 (default on) sets
        names = [m for m in args.models.split(",") if m]
        unknown = [m for m in names if m not in SANA_CONFIGS]
        if unknown:
            ap.error(f"unknown model(s) {unknown}; choose from {sorted(SANA_CONFIGS)}")
        models = {m: SANA_CONFIGS[m] for m in names}
        batches, res = [int(b) for b in args.batch_sizes.split(",") if b], args.resolution
    ckpts = {"both": [False, True], "on": [True], "off": [False]}[args.gradient_checkpointing]

    env = env_info(torch)
    print(f"device: {env.get('gpu', 'cpu (smoke test)')}, torch {env['torch']}", flush=True)
    rows = []
    for name, config in models.items():
        for batch in batches:
            for ckpt in ckpts:
                print(f"Sana {name}, {res} px, batch {batch}, gradient checkpointing {'on' if ckpt else 'off'} ...",
                      flush=True)
                row = run_config(name, config, batch, res, ckpt, args, device, torch)
                rows.append(row)
                print(f"  {row['status']}: " + (f"{row['median_s_per_step']:.4f} s/step, "
                                                 f"peak {row.get('peak_allocated_gib')} GiB" if row["status"] == "ok"
                                                 else row.get("error", "")), flush=True)
    settings = {"resolution": res, "rank": args.rank, "lora_alpha": args.rank, "targets": list(LORA_TARGETS),
                "steps": args.steps, "warmup_steps": args.warmup_steps, "text_tokens": TEXT_TOKENS,
                "configs": {m: SANA_CONFIGS.get(m, SMOKE_CONFIG) for m in models}}
    return finish(rows, args, benchmark="sana/step_gpu", env=env, settings=settings, table=markdown(rows, env))

if __name__ == "__main__":
    sys.exit(main())
