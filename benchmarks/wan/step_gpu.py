#!/usr/bin/env python
"""GPU benchmark of a Wan 2.1 T2V LoRA train step (1.3B and 14B architectures) at 81 x 480 x 832.

    python benchmarks/wan/step_gpu.py --out benchmarks/wan/step_gpu.json --markdown /tmp/wan.md
    python benchmarks/wan/step_gpu.py --models 14b --gradient_checkpointing on
    python benchmarks/wan/step_gpu.py --predict   # no GPU: predicted peaks and FLOPs from a fake-tensor trace

What this measures, honestly: the train step of diffusers' ``WanTransformer3DModel`` with the rectified-flow loss
written below, LoRA and optimizer from dit-lora's own helpers (``benchmarks/common/gpu_step.py``). dit-lora has
no Wan family yet (issue 27; the families are being restructured), so the loss is this script's, not a family's
``compute_loss``, and the attention is diffusers' default dispatch (torch SDPA), not a dit-lora backend. It is
the transformer step only, on synthetic cached inputs: no VAE, no UMT5 in memory, no data loading.

The setting (issue 27): 81 frames x 480 x 832, the Wan VAE (4x temporal, 8x spatial, 16 channels) gives latents
``[1, 16, 21, 60, 104]``; patch (1, 2, 2) makes 21 * 30 * 52 = 32,760 video tokens; UMT5-XXL text embeddings
``[1, 512, 4096]`` (``text_len`` 512 in Wan's ``wan/configs/shared_config.py``). Batch 1. LoRA rank 32, alpha
32 (``dit_lora.modeling.trainables.add_lora``, PEFT, Gaussian A, zero B) on ``to_q``, ``to_k``, ``to_v``,
``to_out.0`` of every block's self-attention (``blocks.N.attn1``) and cross-attention (``blocks.N.attn2``):
8 modules per block, nothing in the FFN, embedders or ``proj_out``. Base weights bf16 and frozen, the
modules diffusers keeps in fp32 when it loads the published bf16 checkpoints (``_keep_in_fp32_modules``:
``time_embedder``, ``scale_shift_table``, ``norm2``; the RoPE tables) kept in fp32, LoRA masters fp32
(``cast_trainable_to_fp32``). Per step, as dit-lora's loop runs it: loss under bf16 autocast, backward,
total-norm clipping at 1.0, fused AdamW (``dit_lora.training.optim.make_optimizer``) with the non-finite
skip handed to the kernel (no host sync), ``zero_grad(set_to_none=True)``.

Loss (rectified flow, as the Wan trainers use it): u ~ U(0, 1), sigma = shift * u / (1 + (shift - 1) * u) with
shift 5.0 (the T2V default of Wan's own ``generate.py``, ``_validate_args``: ``sample_shift = 5.0`` unless the
task is 480p I2V, which gets 3.0; it is the sampling shift, used here for training as the trainers' shifted
timesteps do), x_t = (1 - sigma) * x0 + sigma * eps, timestep = 1000 * sigma, target eps - x0, MSE in fp32.
The step time does not depend on these values.

Architectures (random weights, built directly in bf16 on the GPU; no fp32 copy on the CPU), from diffusers
``scripts/convert_wan_to_diffusers.py`` (``get_transformer_config``: ``Wan-T2V-1.3B`` and ``Wan-T2V-14B``),
checked against Wan's ``wan/configs/wan_t2v_1_3B.py`` / ``wan_t2v_14B.py`` (dim 1536 / 5120, ffn_dim 8960 /
13824, 12 / 40 heads, 30 / 40 layers, patch (1, 2, 2), qk_norm, cross_attn_norm, eps 1e-6, freq_dim 256) and
``WanTransformer3DModel``'s defaults in diffusers 0.42.1 (``rope_max_seq_len`` 1024; no image embedder)::

    1.3B: 30 layers, 12 heads x 128 (1536), ffn 8960, text_dim 4096, in/out 16, freq_dim 256
    14B:  40 layers, 40 heads x 128 (5120), ffn 13824, text_dim 4096, in/out 16, freq_dim 256

FLOPs per step (``step_flops``; d = heads * 128, F = ffn_dim, T = video tokens, L = text tokens, r = rank,
n = layers; multiply-add = 2 FLOPs; element-wise work, norms and RoPE not counted):

* forward, linear: 2 * T * n * (6 d^2 + 2 d F)  [self-attn q k v o, cross-attn q o, FFN]
  + 2 * L * n * 2 d^2  [cross-attn k v on the text] + 2 * T * 64 d * 2  [patch embedding, proj_out]
  + 2 * L * (4096 d + d^2)  [text embedder]
* forward, attention (as a fused kernel): n * (4 T^2 d + 4 T L d)
* forward, LoRA: for each adapted module with N input tokens, 2 N r (in + out)
* backward, linear: data gradients only (the base is frozen, so no weight gradients): 2 * T * (64 d + n * (6 d^2
  + 2 d F) - 3 d^2)  [every video-stream linear, proj_out included, but not block 0's q k v, whose input needs no
  gradient]; none for the text-stream k v, the embedders or the patch embedding (inputs without gradient)
* backward, attention: 2x forward (model FLOPs; a flash kernel also recomputes Q K^T, 2.5x in hardware)
* backward, LoRA: 2 N r (2 out + in) for dB, the gradient through B and dA, plus 2 N r in for its input's
  gradient where that input needs one
* with gradient checkpointing, the blocks' forward (linear + attention + LoRA) runs again in the backward;
  the fused attention backward recomputes Q K^T (0.5x the attention forward) either way.

(The timestep embedder's three matmuls on one token are left out.) Checked against ``torch.utils.flop_counter``
on a 3-layer scaled-down model on CPU, checkpointing off and on: the matmul part agrees within 0.2%; and at full
size against the fake-tensor trace of ``--predict`` (torch's FLOP formulas, attention as the fused kernel): the
hardware figure agrees to 0.1 TFLOP for both models and both checkpointing settings.

``model`` = forward + backward (what MFU uses); ``hardware`` adds both recomputes (what the GPU executes).
MFU = model FLOPs per step / median step time / 989.4e12 (H100 SXM dense bf16 peak), also given against 798e12
(the 8192^3 bf16 matmul this workplace measured on its H100); HFU uses the hardware FLOPs.

Timing: median over the timed steps (CUDA events): 1.3B 5 warm-up + 20 timed, 14B 2 warm-up + 6 timed (about
10 s a step, so fewer steps to stay inside the device time; ``--steps``/``--warmup_steps`` override both).
Peak ``max_memory_allocated`` / ``max_memory_reserved`` since the configuration started (model build
included); an out-of-memory is recorded as ``OOM``.

Without CUDA it exits with status 2 (``--smoke`` runs a 2-layer scaled-down model on CPU for two steps to check
the script, and reports no numbers; ``--predict`` traces each configuration on fake tensors and writes predicted
peaks and FLOPs, marked as such, measuring nothing).
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
    "patch_size": (1, 2, 2), "attention_head_dim": 128, "in_channels": 16, "out_channels": 16, "text_dim": 4096,
    "freq_dim": 256, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads", "eps": 1e-6, "image_dim": None,
    "added_kv_proj_dim": None, "rope_max_seq_len": 1024, "pos_embed_seq_len": None,
}
WAN_CONFIGS = {
    "1.3b": {**_COMMON, "num_attention_heads": 12, "num_layers": 30, "ffn_dim": 8960},
    "14b": {**_COMMON, "num_attention_heads": 40, "num_layers": 40, "ffn_dim": 13824},
}
#: (warm-up, timed) steps per model when --steps / --warmup_steps are not given
STEPS = {"1.3b": (5, 20), "14b": (2, 6)}
SMOKE_CONFIG = {**WAN_CONFIGS["1.3b"], "num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 12,
                "text_dim": 32, "freq_dim": 16, "ffn_dim": 32}
LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")
FLOW_SHIFT = 5.0  # Wan2.1 generate.py: the T2V sample_shift default
TEXT_LEN = 512  # Wan2.1 wan/configs/shared_config.py: text_len
H100_PEAK_BF16 = 989.4e12  # H100 SXM dense bf16
H100_MEASURED_MATMUL = 798e12  # 8192^3 bf16 matmul on this workplace's H100 (device KINDS.md)
VAE_STRIDE = (4, 8, 8)  # Wan2.1 wan/configs: vae_stride


def latent_shape(frames: int, height: int, width: int, channels: int = 16) -> tuple[int, ...]:
    """The Wan VAE's latent for a clip: 4x temporal (first frame alone), 8x spatial, 16 channels."""
    t, s, _ = VAE_STRIDE
    if (frames - 1) % t or height % (2 * s) or width % (2 * s):
        raise ValueError(f"{frames} x {height} x {width}: frames must be 4k+1 and sides multiples of 16")
    return (1, channels, (frames - 1) // t + 1, height // s, width // s)


def video_tokens(config: dict, latent: tuple[int, ...]) -> int:
    p_t, p_h, p_w = config["patch_size"]
    return (latent[2] // p_t) * (latent[3] // p_h) * (latent[4] // p_w)


def step_flops(config: dict, tokens: int, text_tokens: int, rank: int, checkpointing: bool) -> dict:
    """FLOPs of one LoRA train step (the module docstring's formula), in FLOPs."""
    d = config["num_attention_heads"] * config["attention_head_dim"]
    f, n, T, L, r = config["ffn_dim"], config["num_layers"], tokens, text_tokens, rank
    patch = config["in_channels"] * 4  # (1, 2, 2) patch: in * 4 inputs per token
    out = config["out_channels"] * 4
    video_per_block = 6 * d * d + 2 * d * f  # self q k v o, cross q o, FFN up and down
    fwd_linear = (2 * T * n * video_per_block + 2 * L * n * 2 * d * d + 2 * T * (patch * d + d * out)
                  + 2 * L * (config["text_dim"] * d + d * d))
    fwd_attn = n * (4 * T * T * d + 4 * T * L * d)
    # LoRA: per block 6 modules on the video tokens (self q k v o, cross q o), 2 on the text (cross k v)
    lora_fwd_block = 6 * 2 * T * r * (d + d) + 2 * 2 * L * r * (d + d)
    fwd_lora = n * lora_fwd_block
    bwd_linear = 2 * T * (n * video_per_block - 3 * d * d + d * out)
    bwd_attn = 2 * fwd_attn
    lora_w = lambda N: 2 * N * r * (2 * d + d)  # dB, gradient through B, dA (in = out = d)
    lora_x = lambda N: 2 * N * r * d  # the input's gradient through A
    bwd_lora = (n * (6 * lora_w(T) + 2 * lora_w(L))  # weight-side for all 8 modules per block
                + (n * 6 - 3) * lora_x(T))  # input gradients: video-stream modules, but not block 0's q k v
    forward = fwd_linear + fwd_attn + fwd_lora
    backward = bwd_linear + bwd_attn + bwd_lora
    recompute = (2 * T * n * video_per_block + 2 * L * n * 2 * d * d + fwd_attn + fwd_lora) if checkpointing else 0
    attn_recompute = fwd_attn // 2  # a fused attention backward recomputes Q K^T: 2.5x the forward, not 2x
    return {"forward_linear": fwd_linear, "forward_attention": fwd_attn, "forward_lora": fwd_lora,
            "backward_linear": bwd_linear, "backward_attention": bwd_attn, "backward_lora": bwd_lora,
            "recompute": recompute, "attention_backward_recompute": attn_recompute, "model": forward + backward,
            "hardware": forward + backward + recompute + attn_recompute}


class RectifiedFlowLoss:
    """The loss this benchmark trains with (the module docstring): shifted uniform sigma, eps - x0 target."""

    def __init__(self, shift: float = FLOW_SHIFT, num_train_timesteps: int = 1000):
        self.shift, self.num_train_timesteps = shift, num_train_timesteps

    def compute_loss(self, comps, model, batch, generator, cfg):
        import torch
        import torch.nn.functional as F

        x0 = batch["latents"]
        b = x0.shape[0]
        u = torch.rand(b, device=x0.device, generator=generator)
        sigma = self.shift * u / (1 + (self.shift - 1) * u)
        noise = torch.randn(x0.shape, device=x0.device, dtype=x0.dtype, generator=generator)
        s = sigma.view(b, *([1] * (x0.ndim - 1)))
        x_t = (1 - s) * x0 + s * noise
        pred = model(hidden_states=x_t.to(torch.bfloat16), timestep=sigma * self.num_train_timesteps,
                     encoder_hidden_states=batch["prompt_embeds"], return_dict=False)[0]
        return F.mse_loss(pred.float(), (noise - x0).float())


def build_model(config: dict, device, torch):
    """``WanTransformer3DModel`` made directly in bf16 on ``device`` (14B never exists in fp32), RoPE tables fp32."""
    from diffusers import WanTransformer3DModel

    return build_bf16(WanTransformer3DModel, config, device, torch, fp32_buffers=("rope.",))


def run_config(name: str, config: dict, frames: int, height: int, width: int, text_len: int, checkpointing: bool,
               args, warmup: int, steps: int, device, torch) -> dict:
    from dit_lora.config import TrainConfig

    latent = latent_shape(frames, height, width, config["in_channels"])
    tokens = video_tokens(config, latent)
    result = {"model": name, "frames": frames, "height": height, "width": width, "batch_size": 1,
              "latent_shape": list(latent), "video_tokens": tokens, "text_tokens": text_len,
              "gradient_checkpointing": checkpointing, "rank": args.rank}
    flops = step_flops(config, tokens, text_len, args.rank, checkpointing)
    result["tflop_per_step"] = {k: round(v / 1e12, 2) for k, v in flops.items()}

    def body() -> None:
        model = build_model(config, device, torch)
        result["base_params"] = sum(p.numel() for p in model.parameters())
        cfg = TrainConfig(family="wan", rank=args.rank, lora_alpha=args.rank, train_batch_size=1,
                          gradient_checkpointing=checkpointing, learning_rate=1e-4, max_grad_norm=1.0,
                          mixed_precision="bf16", max_num_frames=frames, height=height, width=width)
        optimizer, fused, params, result["lora_params"] = prepare_lora(model, cfg, LORA_TARGETS, checkpointing, device)
        result["fused_adamw"] = fused
        adapted = sorted({n.rsplit(".lora_A", 1)[0] for n, _ in model.named_parameters() if ".lora_A." in n})
        result["lora_modules"] = len(adapted)
        expected = {f"blocks.{i}.attn{a}.{t}" for i in range(config["num_layers"]) for a in (1, 2)
                    for t in LORA_TARGETS}
        if set(adapted) != expected:
            raise AssertionError(f"LoRA landed on {adapted[:10]}..., expected {sorted(expected)[:10]}...")
        if any(p.dtype != torch.float32 for p in params):
            raise AssertionError("LoRA masters are not fp32")
        model.train()
        gen = torch.Generator(device=device).manual_seed(0)
        data = {"latents": torch.randn(latent, device=device, generator=gen),
                "prompt_embeds": torch.randn(1, text_len, config["text_dim"], device=device,
                                             generator=gen).to(torch.bfloat16)}
        step = train_step_fn(RectifiedFlowLoss(), None, model, data, cfg,
                             optimizer, fused, params, device, torch)
        result.update(time_steps(step, steps=steps, warmup_steps=warmup, device=device, torch=torch))
        med = result["median_s_per_step"]
        result["achieved_tflops"] = round(flops["model"] / med / 1e12, 1)
        result["mfu_vs_989"] = round(flops["model"] / med / H100_PEAK_BF16, 3)
        result["mfu_vs_measured_798"] = round(flops["model"] / med / H100_MEASURED_MATMUL, 3)
        result["hfu_vs_989"] = round(flops["hardware"] / med / H100_PEAK_BF16, 3)
        result["lora_updated"] = lora_updated(model)
        result.update(memory_fields(device, torch))

    return run_guarded(result, body, device, torch)


def predict_config(name: str, config: dict, frames: int, height: int, width: int, text_len: int,
                   checkpointing: bool, rank: int, torch) -> dict:
    """No GPU: the step traced at full depth on fake tensors (``dit_lora.plan.fake``: ``LiveBytes`` counts the bytes
    every operator's storage keeps alive and FLOPs by torch's formulas, ``fused_attention`` traces attention as a
    GPU's fused kernel holds it; nothing is computed, 5-10 s a configuration). Peak = weights + LoRA masters + their
    two AdamW moments + the batch + the traced step (activations and gradients). CPU autocast's op list, not CUDA's,
    and no allocator workspace or fragmentation: on the H100 the planner read 4-31% low (benchmarks/RESULTS.md,
    "Memory plan: predicted vs measured on the H100").

    ``dit-lora plan`` once traced one and two blocks and extrapolated; for Wan that overstated the checkpointed step
    (1.3B: 11.8 GiB instead of the full trace's 6.5), because block 0's q, k, v inputs need no gradient and its
    backward is lighter, so the 1-to-2 difference is not the per-block growth (2-to-3 is, and extrapolates to the
    full trace exactly)."""
    from dit_lora.plan.fake import LiveBytes, fake_mode, fake_module, fused_attention, module_bytes
    from dit_lora.modeling import trainables

    latent = latent_shape(frames, height, width, config["in_channels"])
    tokens = video_tokens(config, latent)
    flops = step_flops(config, tokens, text_len, rank, checkpointing)
    row = {"model": name, "frames": frames, "height": height, "width": width, "batch_size": 1,
           "latent_shape": list(latent), "video_tokens": tokens, "text_tokens": text_len,
           "gradient_checkpointing": checkpointing, "rank": rank, "status": "predicted (not measured)",
           "tflop_per_step": {k: round(v / 1e12, 2) for k, v in flops.items()}}
    model = build_model(config, torch.device("meta"), torch)
    trainables.add_lora(model, rank=rank, alpha=rank, dropout=0.0, targets=LORA_TARGETS, seed=0)
    trainables.cast_trainable_to_fp32(model, under_autocast=True)
    if checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    weights, lora = module_bytes(model, trainable=False), module_bytes(model, trainable=True)
    mode = fake_mode()
    fake_module(model, mode)
    with mode:
        batch = {"latents": torch.empty(latent),
                 "prompt_embeds": torch.empty(1, text_len, config["text_dim"], dtype=torch.bfloat16)}
    batch_bytes = sum(v.numel() * v.element_size() for v in batch.values())
    live = LiveBytes()
    with mode, fused_attention(), live, torch.autocast("cpu", dtype=torch.bfloat16):
        loss = RectifiedFlowLoss().compute_loss(None, model, batch, torch.Generator().manual_seed(0), None)
        loss.backward()
    row.update(predicted_weights_gib=round(weights / 2**30, 2),
               predicted_lora_and_moments_gib=round(3 * lora / 2**30, 2), predicted_step_gib=round(live.peak / 2**30, 2),
               predicted_peak_allocated_gib=round((weights + 3 * lora + batch_bytes + live.peak) / 2**30, 2),
               traced_tflop_per_step=round(live.flops / 1e12, 1),
               floor_s_at_798=round(flops["hardware"] / H100_MEASURED_MATMUL, 2))
    return row


def predict_markdown(rows: list[dict]) -> str:
    lines = [
        "| model | grad. ckpt | predicted peak allocated (GiB) | of which weights / step | model TFLOP/step "
        "(formula) | executed TFLOP/step (formula / fake-tensor trace) | floor at 798 TFLOP/s (s) |",
        "|---|---|---:|---|---:|---|---:|",
    ]
    for r in rows:
        tf = r["tflop_per_step"]
        lines.append(
            f"| Wan 2.1 {r['model']} | {'on' if r['gradient_checkpointing'] else 'off'} | "
            f"{r['predicted_peak_allocated_gib']} | {r['predicted_weights_gib']} / {r['predicted_step_gib']} | "
            f"{tf['model']:.0f} | {tf['hardware']:.0f} / {r['traced_tflop_per_step']:.0f} | {r['floor_s_at_798']} |")
    return "\n".join(lines)


def markdown(rows: list[dict], env: dict) -> str:
    lines = [
        device_line(env),
        "",
        "| model | grad. ckpt | s/step (median) | peak allocated (GiB) | peak reserved (GiB) | model TFLOP/step | "
        "TFLOP/s | MFU vs 989 | MFU vs 798 (measured matmul) | HFU vs 989 (with recompute) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ckpt = "on" if r["gradient_checkpointing"] else "off"
        tf = r["tflop_per_step"]["model"]
        if r["status"] != "ok":
            lines.append(f"| Wan 2.1 {r['model']} | {ckpt} | {r['status']} | | | {tf} | | | | |")
            continue
        lines.append(
            f"| Wan 2.1 {r['model']} | {ckpt} | {r['median_s_per_step']:.3f} | {r.get('peak_allocated_gib', '')} | "
            f"{r.get('peak_reserved_gib', '')} | {tf} | {r['achieved_tflops']} | {r['mfu_vs_989']:.1%} | "
            f"{r['mfu_vs_measured_798']:.1%} | {r['hfu_vs_989']:.1%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "wan" / "step_gpu.json"))
    ap.add_argument("--markdown", default=None, help="Also write the table to this file.")
    ap.add_argument("--models", default="1.3b,14b", help=f"Comma-separated subset of {','.join(WAN_CONFIGS)}.")
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--gradient_checkpointing", default="both", choices=("both", "on", "off"),
                    help="both: on first, then off (an OOM is recorded).")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--steps", type=int, default=None, help="Timed steps (default: 20 for 1.3b, 6 for 14b).")
    ap.add_argument("--warmup_steps", type=int, default=None, help="Warm-up steps (default: 5 for 1.3b, 2 for 14b).")
    ap.add_argument("--predict", action="store_true",
                    help="No GPU needed: predict each configuration's peak memory and FLOPs by tracing the step on "
                         "fake tensors at full depth; writes --out with status 'predicted'.")
    ap.add_argument("--smoke", action="store_true",
                    help="No GPU needed: run a 2-layer scaled-down model on CPU for 2 steps to test this script.")
    args = ap.parse_args(argv)

    import torch

    if args.predict:
        names = [m for m in args.models.split(",") if m]
        ckpts = {"both": [True, False], "on": [True], "off": [False]}[args.gradient_checkpointing]
        rows = []
        for name in names:
            for ckpt in ckpts:
                print(f"predicting Wan 2.1 {name}, gradient checkpointing {'on' if ckpt else 'off'} ...", flush=True)
                rows.append(predict_config(name, WAN_CONFIGS[name], args.frames, args.height, args.width, TEXT_LEN,
                                           ckpt, args.rank, torch))
        env = env_info(torch)
        settings = {"measured": False, "frames": args.frames, "height": args.height, "width": args.width,
                    "text_tokens": TEXT_LEN,
                    "rank": args.rank, "targets": list(LORA_TARGETS), "flow_shift": FLOW_SHIFT,
                    "measured_matmul_flops": H100_MEASURED_MATMUL,
                    "configs": {m: WAN_CONFIGS[m] for m in names}}
        table = predict_markdown(rows)
        args.smoke = False
        return finish(rows, args, benchmark="wan/step_gpu --predict (no GPU: nothing measured)", env=env,
                      settings=settings, table=table)
    if args.smoke:
        device = torch.device("cpu")
        models = {"smoke": SMOKE_CONFIG}
        frames, height, width, text_len = 9, 64, 64, 16
        args.steps, args.warmup_steps = 2, 1
        args.rank = min(args.rank, 8)  # the scaled-down layers are narrower than a real rank (refused above them)
    else:
        if not torch.cuda.is_available():
            print(no_cuda_message("wan/step_gpu.py", torch), file=sys.stderr)
            return 2
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True
        names = [m for m in args.models.split(",") if m]
        unknown = [m for m in names if m not in WAN_CONFIGS]
        if unknown:
            ap.error(f"unknown model(s) {unknown}; choose from {sorted(WAN_CONFIGS)}")
        models = {m: WAN_CONFIGS[m] for m in names}
        frames, height, width, text_len = args.frames, args.height, args.width, TEXT_LEN
    ckpts = {"both": [True, False], "on": [True], "off": [False]}[args.gradient_checkpointing]
    env = env_info(torch)
    print(f"device: {env.get('gpu', 'cpu (smoke test)')}, torch {env['torch']}, diffusers {env['diffusers']}",
          flush=True)
    rows = []
    for name, config in models.items():
        warmup, steps = STEPS.get(name, (1, 2))
        warmup = warmup if args.warmup_steps is None else args.warmup_steps
        steps = steps if args.steps is None else args.steps
        for ckpt in ckpts:
            print(f"Wan 2.1 {name}, {frames}x{height}x{width}, gradient checkpointing {'on' if ckpt else 'off'}, "
                  f"{warmup} warm-up + {steps} timed ...", flush=True)
            row = run_config(name, config, frames, height, width, text_len, ckpt, args, warmup, steps, device, torch)
            rows.append(row)
            if args.smoke:  # checks the script only: no figures
                print(f"  {row['status']}" + ("" if row["status"] == "ok" else f": {row.get('error', '')}"), flush=True)
                continue
            print(f"  {row['status']}: " + (f"{row['median_s_per_step']:.3f} s/step, peak "
                                             f"{row.get('peak_allocated_gib')} GiB, MFU {row['mfu_vs_989']:.1%}"
                                             if row["status"] == "ok" else row.get("error", "")), flush=True)
    settings = {"frames": frames, "height": height, "width": width, "text_tokens": text_len, "rank": args.rank,
                "lora_alpha": args.rank, "targets": list(LORA_TARGETS), "flow_shift": FLOW_SHIFT,
                "steps": {n: STEPS.get(n) for n in models}, "steps_override": [args.warmup_steps, args.steps],
                "peak_bf16_flops": H100_PEAK_BF16, "measured_matmul_flops": H100_MEASURED_MATMUL,
                "configs": {m: WAN_CONFIGS.get(m, SMOKE_CONFIG) for m in models}}
    return finish(rows, args, benchmark="wan/step_gpu", env=env, settings=settings, table=markdown(rows, env))


if __name__ == "__main__":
    sys.exit(main())
