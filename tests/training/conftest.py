"""Fixtures of the training tests: the tiny Sana transformer with LoRA as the family trains it, one loss step
on it, and SDPA's global state restored after every test (the canary and the drills patch it)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.registry import get_family
from dit_lora.contract.family import Components
from dit_lora.modeling.flow_matching import training_scheduler
from dit_lora.modeling import trainables
from dit_lora.training.canary import restore_sdpa_backends, sdpa_backend_flags


@pytest.fixture(autouse=True)
def sdpa_state():
    """Every test leaves SDPA backends and the SDPA function as it found them."""
    flags = sdpa_backend_flags()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    yield
    torch.nn.functional.scaled_dot_product_attention = sdpa
    restore_sdpa_backends(flags)


@pytest.fixture
def sana_model(tiny_sana):
    """``make(dtype=bf16, lora=True)``: the tiny Sana transformer, frozen as the family loads it, LoRA in fp32."""

    def make(dtype=torch.bfloat16, lora=True):
        from diffusers import SanaTransformer2DModel

        model = SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer", torch_dtype=dtype)
        model.requires_grad_(False)  # as the family loads it
        if lora:
            trainables.add_lora(model, rank=4, alpha=8, dropout=0.0, targets=("to_q", "to_k", "to_v", "to_out.0"),
                              seed=0)
            trainables.cast_trainable_to_fp32(model, under_autocast=True)
        return model.train()

    return make


@pytest.fixture
def sana_step(tiny_sana, sana_model):
    """``(model, loss_fn, batch)``: one Sana loss step on the tiny model with LoRA."""
    model = sana_model()
    cfg = TrainConfig(pretrained_model_name_or_path=str(tiny_sana), train_data_dir="unused", resolution=64)
    family = get_family("sana")
    comps = Components(model=model, scheduler=training_scheduler({"shift": 3.0}))
    gen = torch.Generator().manual_seed(0)
    batch = {
        "latents": torch.randn(2, 4, 8, 8, generator=gen),
        "prompt_embeds": torch.randn(2, 12, 48, generator=gen).to(torch.bfloat16),
        "prompt_attention_mask": torch.tensor([[1] * 12, [1] * 5 + [0] * 7]),
        "sample_index": [3, 11],
    }

    def loss_fn(m, b, g):
        return family.loss.compute_loss(comps, m, b, g, cfg)

    return model, loss_fn, batch
