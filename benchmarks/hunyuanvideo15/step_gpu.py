#!/usr/bin/env python
"""GPU benchmark of a HunyuanVideo 1.5 LoRA train step (the 8.3B transformer) at its published 480p size.

    python benchmarks/hunyuanvideo15/step_gpu.py --out hv15.json                  # 121 x 480 x 848, then 61 frames
    python benchmarks/hunyuanvideo15/step_gpu.py --smoke                          # CPU: 1 layer, tiny; checks the script

What this measures, honestly: the transformer step alone, before dit-lora has a HunyuanVideo 1.5 family (issue 48),
so there are no levers here (no fp8, block swap or offloading) and no plan's 24 GB answer to run: bf16 base, fp32
LoRA masters, diffusers' gradient checkpointing, the loss below, the LoRA and the optimizer from dit-lora's own
helpers (``benchmarks/common/gpu_step.py``: fused AdamW, the non-finite skip inside the kernel, no host sync).
It gives the family's plan a measured peak and step time to be checked against.

The setting: ``hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v`` generates 121 frames (24 fps) at 480p;
848 x 480 is 16:9 on the VAE's 16 px grid. The VAE (16x spatial, 4x temporal, 32 channels) gives latents
``[1, 32, 31, 30, 53]``, patch 1: 49,290 video tokens. The transformer reads the latents with the condition latents
and mask concatenated (65 channels, zeros for text-to-video, as ``HunyuanVideo15Pipeline`` passes them), Qwen2.5-VL
embeddings padded to 1,000 tokens (200 valid here), ByT5 embeddings padded to 256 (none valid: no quoted text) and
729 zero image embeddings (text-to-video). Architecture: ``HunyuanVideo15Transformer3DModel``'s defaults in diffusers
0.42.1 (54 blocks, 16 heads x 128, the published 8.3B) with ``task_type`` t2v and ``target_size`` 480.
LoRA rank 32 on every attention projection of the 54 blocks (video and text streams, as musubi-tuner targets them).

Loss: flow matching, sigma = shift * u / (1 + (shift - 1) * u), u ~ U(0, 1), shift 5; the step time does not depend
on it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common.gpu_step import (
    build_bf16,
    env_info,
    finish,
    lora_updated,
    memory_fields,
    no_cuda_message,
    prepare_lora,
    run_guarded,
    time_steps,
    train_step_fn,
)

CONFIG = {"num_layers": 54, "num_attention_heads": 16, "attention_head_dim": 128, "in_channels": 65,
          "out_channels": 32, "task_type": "t2v", "target_size": 480}
SMOKE_CONFIG = {**CONFIG, "num_layers": 1, "num_refiner_layers": 1, "num_attention_heads": 2, "attention_head_dim": 16,
                "text_embed_dim": 16, "text_embed_2_dim": 16, "image_embed_dim": 16, "rope_axes_dim": (4, 6, 6)}
TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
TEXT, TEXT_VALID, BYT5, IMAGE = 1000, 200, 256, 729


class FlowLoss:
    """The benchmark's loss (the module docstring)."""

    def compute_loss(self, comps, model, batch, generator, cfg):
        import torch
        import torch.nn.functional as F

        x0 = batch["latents"]
        u = torch.rand(1, device=x0.device, generator=generator)
        sigma = 5.0 * u / (1 + 4.0 * u)
        noise = torch.randn(x0.shape, device=x0.device, dtype=x0.dtype, generator=generator)
        x_t = (1 - sigma) * x0 + sigma * noise
        inputs = torch.cat([x_t, torch.zeros_like(x_t), torch.zeros_like(x_t[:, :1])], dim=1).to(torch.bfloat16)
        pred = model(hidden_states=inputs, timestep=sigma * 1000, return_dict=False, **batch["conditions"])[0]
        return F.mse_loss(pred.float(), (noise - x0).float())


def _conditions(config: dict, device, torch) -> dict:
    """What the pipeline passes besides the latents: padded text embeddings with their masks, zero image embeds."""
    gen = torch.Generator(device=device).manual_seed(1)
    mask = torch.zeros(1, TEXT, device=device)
    mask[:, :TEXT_VALID] = 1
    return {"encoder_hidden_states": torch.randn(1, TEXT, config.get("text_embed_dim", 3584), device=device,
                                                 generator=gen).bfloat16(),
            "encoder_attention_mask": mask,
            "encoder_hidden_states_2": torch.zeros(1, BYT5, config.get("text_embed_2_dim", 1472), device=device,
                                                   dtype=torch.bfloat16),
            "encoder_attention_mask_2": torch.zeros(1, BYT5, device=device),
            "image_embeds": torch.zeros(1, IMAGE, config.get("image_embed_dim", 1152), device=device,
                                        dtype=torch.bfloat16)}


def run_config(config: dict, frames: int, height: int, width: int, args, device, torch) -> dict:
    """One size's timed steps; the row (status OOM when it does not fit)."""
    from diffusers import HunyuanVideo15Transformer3DModel

    from dit_lora.config import TrainConfig

    latent = (1, 32, (frames - 1) // 4 + 1, height // 16, width // 16)
    result = {"frames": frames, "height": height, "width": width, "latent_shape": list(latent),
              "video_tokens": latent[2] * latent[3] * latent[4], "rank": args.rank, "gradient_checkpointing": True}

    def body() -> None:
        model = build_bf16(HunyuanVideo15Transformer3DModel, config, device, torch)
        result["base_params"] = sum(p.numel() for p in model.parameters())
        cfg = TrainConfig(family="wan", rank=args.rank, lora_alpha=args.rank, train_batch_size=1,
                          gradient_checkpointing=True, learning_rate=1e-4, max_grad_norm=1.0, mixed_precision="bf16")
        optimizer, fused, params, result["lora_params"] = prepare_lora(model, cfg, TARGETS, True, device)
        result["lora_modules"] = len({n.rsplit(".lora_A", 1)[0] for n, _ in model.named_parameters() if ".lora_A." in n})
        model.train()
        gen = torch.Generator(device=device).manual_seed(0)
        data = {"latents": torch.randn(latent, device=device, generator=gen), "conditions": _conditions(config, device,
                                                                                                        torch)}
        step = train_step_fn(FlowLoss(), None, model, data, cfg, optimizer, fused, params, device, torch)
        result.update(time_steps(step, steps=args.steps, warmup_steps=args.warmup_steps, device=device, torch=torch))
        result["lora_updated"] = lora_updated(model)
        result.update(memory_fields(device, torch))

    return run_guarded(result, body, device, torch)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="121x480x848,61x480x848", help="frames x height x width, comma-separated")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup_steps", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/hunyuanvideo15/step_gpu.json")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    import torch

    if args.smoke:
        device, config, sizes = torch.device("cpu"), SMOKE_CONFIG, [(5, 32, 48)]
        args.steps, args.warmup_steps = 2, 0
    elif not torch.cuda.is_available():
        print(no_cuda_message("hunyuanvideo15/step_gpu.py", torch), file=sys.stderr)
        return 2
    else:
        device, config = torch.device("cuda"), CONFIG
        sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    env = env_info(torch)
    rows = []
    for frames, height, width in sizes:
        rows.append(run_config(config, frames, height, width, args, device, torch))
        print(rows[-1], flush=True)
    table = "\n".join(f"| {r['frames']} x {r['height']} x {r['width']} | {r['video_tokens']:,} | "
                      f"{r.get('median_s_per_step', r['status'])} | {r.get('peak_allocated_gib', '-')} |" for r in rows)
    table = f"Device: {env.get('gpu')}\n\n| size | video tokens | s/step (median) | peak allocated GiB |\n|---|---:|---:|---:|\n"\
        + table
    return finish(rows, args, benchmark="hunyuanvideo15_step_gpu", env=env, settings={"config": CONFIG, "rank": args.rank,
                  "targets": TARGETS, "text_tokens": [TEXT, TEXT_VALID, BYT5, IMAGE]}, table=table)


if __name__ == "__main__":
    sys.exit(main())
