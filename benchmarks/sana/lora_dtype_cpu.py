#!/usr/bin/env python
"""Controlled A/B of one Sana LoRA train step: where dit-lora's transformer step loses time on CPU.

    python benchmarks/sana/lora_dtype_cpu.py [--size small --resolution 256 --steps 12]

``sana/vs_example_cpu.py`` found dit-lora's step (transformer forward/backward + clipping + AdamW)
a few percent slower than the same part of diffusers' example on the compute-bound small model.
The two differ in how the LoRA weights are kept: dit-lora casts them to fp32 (master weights,
``cast_trainable_to_fp32``) and uses fused AdamW; the example leaves them in the base model's
bf16 and uses the default (for-loop) AdamW. This script times, in one process, interleaved,
on identical inputs, the transformer step with:

* ``fp32-lora/fused``   -- dit-lora's setup;
* ``bf16-lora/default`` -- the diffusers example's setup;
* ``fp32-lora/fused/no-input-cast`` -- dit-lora's setup with PEFT's input-dtype cast turned off
  (``cast_input_dtype_enabled = False`` on the LoRA layers, what
  ``peft.helpers.disable_input_dtype_casting`` does). PEFT otherwise casts every LoRA layer's
  input activation to the LoRA weight dtype (fp32) before ``lora_A``; under bf16 autocast the
  matmul casts it straight back to bf16, so the copy is pure overhead (forward and backward).

It also checks that turning the cast off does not change the numbers under autocast (the
bf16 -> fp32 -> bf16 round trip is exact), by comparing loss and LoRA gradients of one step.
Uses the random demo model from ``dit_lora.data.synthetic`` (built into --work_dir if missing).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]
VARIANTS = ("fp32-lora/fused", "bf16-lora/default", "fp32-lora/fused/no-input-cast")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="small", choices=("tiny", "small"))
    ap.add_argument("--resolution", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12, help="Timed steps per variant (interleaved).")
    ap.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "dit-lora-bench-cpu"))
    args = ap.parse_args()

    import torch
    from diffusers import SanaTransformer2DModel
    from diffusers.training_utils import cast_training_params
    from peft import LoraConfig

    from dit_lora.families.sana.demo import build_tiny_sana_pipeline

    path = build_tiny_sana_pipeline(Path(args.work_dir) / "models" / args.size, size=args.size, seed=0)
    base = SanaTransformer2DModel.from_pretrained(path, subfolder="transformer", torch_dtype=torch.bfloat16)
    cfg = base.config
    g = torch.Generator().manual_seed(0)
    side = args.resolution // 8
    latents = torch.randn(args.batch, cfg.in_channels, side, side, generator=g)
    embeds = torch.randn(args.batch, 300, cfg.caption_channels, generator=g).to(torch.bfloat16)
    mask = torch.zeros(args.batch, 300, dtype=torch.long)
    mask[:, :12] = 1

    def build(variant: str):
        lora_dtype, opt, *rest = variant.split("/")
        model = copy.deepcopy(base).requires_grad_(False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model.add_adapter(LoraConfig(r=args.rank, lora_alpha=2 * args.rank, init_lora_weights="gaussian",
                                         target_modules=TARGETS))
        if lora_dtype == "fp32-lora":
            cast_training_params(model, dtype=torch.float32)
        if rest == ["no-input-cast"]:
            for module in model.modules():
                if hasattr(module, "lora_A"):
                    module.cast_input_dtype_enabled = False
        params = [p for p in model.parameters() if p.requires_grad]
        kw = dict(lr=1e-3, weight_decay=1e-4)
        optim = torch.optim.AdamW(params, fused=True, **kw) if opt == "fused" else torch.optim.AdamW(params, **kw)
        return model.train(), params, optim

    def forward_backward(model, seed: int):
        gen = torch.Generator().manual_seed(seed)
        sigma = torch.rand(args.batch, generator=gen)
        noise = torch.randn(latents.shape, generator=gen)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            s = sigma.view(-1, 1, 1, 1)
            pred = model(hidden_states=(1 - s) * latents + s * noise, encoder_hidden_states=embeds,
                         encoder_attention_mask=mask, timestep=sigma * 1000, return_dict=False)[0]
            loss = ((pred.float() - (noise - latents)) ** 2).mean()
        loss.backward()
        return loss

    def step(model, params, optim, seed: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        forward_backward(model, seed)
        t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        return t1 - t0, time.perf_counter() - t0

    # Same numbers with and without the input cast?
    a, _, _ = build(VARIANTS[0])
    b, _, _ = build(VARIANTS[2])
    la, lb = forward_backward(a, 123), forward_backward(b, 123)
    grads_a = {n: p.grad for n, p in a.named_parameters() if p.grad is not None}
    diff = max((grads_a[n] - p.grad).abs().max().item() for n, p in b.named_parameters() if p.grad is not None)
    print(f"no-input-cast vs fp32-lora: |loss diff| = {abs(la.item() - lb.item()):.3g}, max |LoRA grad diff| = {diff:.3g}")
    del a, b

    models = {v: build(v) for v in VARIANTS}
    for v in VARIANTS:  # warm-up
        for i in range(2):
            step(*models[v], seed=i)
    times = {v: [] for v in VARIANTS}
    for i in range(args.steps):
        for v in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
            times[v].append(step(*models[v], seed=1000 + i))
    print(f"Sana {args.size}, {args.resolution} px, batch {args.batch}, rank {args.rank}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; median over {args.steps} interleaved steps:")
    ref = statistics.median(t for _, t in times[VARIANTS[0]])
    for v in VARIANTS:
        fb = statistics.median(x for x, _ in times[v])
        total = statistics.median(t for _, t in times[v])
        print(f"  {v:32s} step {total * 1e3:8.1f} ms (fwd+bwd {fb * 1e3:8.1f} ms)  {total / ref:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
