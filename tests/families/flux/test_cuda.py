"""FLUX.1's transformer trains on CUDA in bf16: finite LoRA gradients close to fp32's, from diffusers' and PEFT's own
code alone (no dit-lora in the step), and through dit-lora's loop.

Why these exist: on 2026-11-27 one NVIDIA H200 (torch 2.11.0+cu130, cuDNN 9.19, diffusers 0.42.1, peft 0.21.2) ran
the FLUX.1, FLUX.1 Kontext and Chroma demos with every update skipped as non-finite (bf16 gradients of block 0's
``to_k`` LoRA non-finite, the fp32 replay finite; with every attention backend and with ``--kernels off``), and
FLUX.1 [dev] at its published depth and 1024 px stopped in the first backward with a CUDA illegal memory access;
the Lumina 2, Krea 2 and Ideogram 4 demos trained on the same machine (benchmarks/RESULTS.md, "FLUX.1 on an H200").
The cause was not isolated in that lease. The bare test says whether diffusers' FLUX.1 blocks with PEFT's LoRA fail
on their own (then it is theirs or torch's, and the family must route around it) or only through dit-lora's loop
(then it is ours). The CPU case checks the test's own code in CI."""

from __future__ import annotations

import json

import pytest
import torch

from dit_lora.kit.packed import LORA_LAYERS, latent_ids

#: (widths, image tokens per side, text tokens, batch): the demo's tiny transformer, and FLUX.1 [dev]'s real widths
#: at one double and one single block over a 1024 px image (4,096 image tokens and T5's 512)
SIZES = {"demo": ("demo", 4, 32, 2), "real": ("real", 64, 512, 1)}


def _transformer(widths: str):
    from diffusers import FluxTransformer2DModel

    from dit_lora.catalogue import by_hub_id
    from dit_lora.families.flux.demo import build_tiny_flux_components

    if widths == "demo":
        return build_tiny_flux_components()["transformer"]
    config = {**by_hub_id("black-forest-labs/FLUX.1-dev").configs["transformer/config.json"],
              "num_layers": 1, "num_single_layers": 1}
    torch.manual_seed(0)
    return FluxTransformer2DModel.from_config(config)


def _lora_grads(device: str, size: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """One forward and backward of a LoRA'd FLUX.1 transformer, frozen weights in ``dtype`` (bf16: autocast, as the
    loop trains; fp32: no autocast), gradient checkpointing on; the LoRA gradients, on the host in fp32."""
    from peft import LoraConfig

    widths, side, text, batch = SIZES[size]
    model = _transformer(widths).to(device=device, dtype=dtype)
    model.requires_grad_(False)
    torch.manual_seed(0)  # PEFT's gaussian init draws from the global generator: the same LoRA in every call
    model.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=list(LORA_LAYERS), init_lora_weights="gaussian"))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    model.enable_gradient_checkpointing()
    model.train()
    cfg = model.config
    g = torch.Generator().manual_seed(1)
    inputs = {
        "hidden_states": torch.randn(batch, side * side, cfg.in_channels, generator=g),
        "encoder_hidden_states": torch.randn(batch, text, cfg.joint_attention_dim, generator=g),
        "pooled_projections": torch.randn(batch, cfg.pooled_projection_dim, generator=g),
        "timestep": torch.rand(batch, generator=g),
        "guidance": torch.full((batch,), 3.5),
    }
    inputs = {k: v.to(device=device, dtype=dtype if v.ndim > 1 else torch.float32) for k, v in inputs.items()}
    ids = {"img_ids": latent_ids(side, side, device, dtype), "txt_ids": torch.zeros(text, 3, device=device, dtype=dtype)}
    with torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        out = model(**inputs, **ids, return_dict=False)[0]
    target = torch.randn(out.shape, generator=g).to(device)
    torch.nn.functional.mse_loss(out.float(), target).backward()
    return {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.requires_grad}


def _check(grads: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    bad = [n for n, g in grads.items() if not torch.isfinite(g).all()]
    assert not bad, f"{len(bad)} non-finite bf16 LoRA gradients, the first {bad[:3]}"
    # the whole gradient's direction: a random tiny model in bf16 is noisy tensor by tensor (0.957 on a CPU, where
    # single tensors differ by up to half their norm), garbage read from the wrong memory is not
    got, want = (torch.cat([g[n].flatten() for n in reference]) for g in (grads, reference))
    cosine = torch.nn.functional.cosine_similarity(got, want, dim=0).item()
    assert cosine > 0.9, f"bf16 LoRA gradients point away from fp32's (cosine {cosine:.3f})"


def test_on_cpu_the_bare_lora_step_is_finite_and_close_to_fp32():
    _check(_lora_grads("cpu", "demo", torch.bfloat16), _lora_grads("cpu", "demo", torch.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("size", sorted(SIZES))
def test_on_cuda_the_bare_lora_step_is_finite_and_close_to_fp32(size):
    """diffusers' FLUX.1 blocks and PEFT's LoRA alone, as the loop runs them (bf16 autocast, checkpointing)."""
    _check(_lora_grads("cuda", size, torch.bfloat16), _lora_grads("cuda", size, torch.float32))


@pytest.mark.gpu
def test_on_cuda_the_demo_trains_without_skipped_steps(tiny_flux, tmp_path):
    """The demo's pipeline and data through dit-lora's loop on CUDA: no update skipped as non-finite."""
    from dit_lora.commands.recipe import parse_run
    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.training.loop import train

    data = make_shapes_dataset(tmp_path / "shapes", n=8, size=64)
    out = tmp_path / "out"
    cfg = parse_run(["--pretrained_model_name_or_path", str(tiny_flux), "--train_data_dir", str(data),
                     "--output_dir", str(out), "--resolution", "64", "--max_sequence_length", "32", "--rank", "8",
                     "--train_batch_size", "2", "--max_train_steps", "8", "--learning_rate", "1e-3",
                     "--report_to", "none", "--checkpointing_steps", "0", "--seed", "0"], "flux")
    train(cfg)
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["skipped_steps"] == 0, summary
