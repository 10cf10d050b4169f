"""The attention canary: finite on the tiny model, catches a broken SDPA backend, falls back to math."""

from __future__ import annotations

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.families import get_family
from dit_lora.families.base import Components
from dit_lora.families.sana import training_scheduler
from dit_lora.training import adapters
from dit_lora.training.canary import (attention_canary, install_broken_attention, non_math_sdpa_enabled,
                                      restore_sdpa_backends, sdpa_backend_flags)


@pytest.fixture(autouse=True)
def sdpa_state():
    """Every test leaves SDPA backends and the SDPA function as it found them."""
    flags = sdpa_backend_flags()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    yield
    torch.nn.functional.scaled_dot_product_attention = sdpa
    restore_sdpa_backends(flags)


def _model(tiny_sana, dtype=torch.bfloat16, lora=True):
    from diffusers import SanaTransformer2DModel

    model = SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer", torch_dtype=dtype)
    model.requires_grad_(False)  # as the family loads it
    if lora:
        adapters.add_lora(model, rank=4, alpha=8, dropout=0.0, targets=("to_q", "to_k", "to_v", "to_out.0"), seed=0)
        adapters.cast_trainable_to_fp32(model, under_autocast=True)
    return model.train()


@pytest.fixture
def setup(tiny_sana):
    model = _model(tiny_sana)
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
        return family.compute_loss(comps, m, b, g, cfg)

    return model, loss_fn, batch


def test_canary_is_finite_on_the_tiny_model(tiny_sana):
    model = _model(tiny_sana)
    flags = sdpa_backend_flags()
    logged = []
    result = attention_canary(model, torch.device("cpu"), torch.bfloat16, logged.append)
    assert result["finite"] and result["ok"] and not result["fell_back"]
    assert {k["processor"] for k in result["kinds"]} == {"SanaLinearAttnProcessor2_0", "SanaAttnProcessor2_0"}
    assert all(k["kind"] == "module" for k in result["kinds"])
    assert sdpa_backend_flags() == flags
    assert logged == [result["message"]]
    assert not any(p.grad is not None for p in model.parameters())


def test_broken_attention_is_caught_and_math_fallback_trains_finite(setup):
    model, loss_fn, batch = setup
    original = torch.nn.functional.scaled_dot_product_attention
    uninstall = install_broken_attention()
    try:
        assert non_math_sdpa_enabled()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.isnan(loss_fn(model, batch, torch.Generator().manual_seed(0)))  # the drill bites
        result = attention_canary(model, torch.device("cpu"), torch.bfloat16, None)
        assert not result["finite"] and result["fell_back"] and result["ok"]
        assert "flash" in result["switched"] and "SanaAttnProcessor2_0" in result["message"]
        assert "math" in result["message"]
        assert not non_math_sdpa_enabled() and sdpa_backend_flags()["math"]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model, batch, torch.Generator().manual_seed(0))
        grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
        assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
    finally:
        uninstall()
    assert torch.nn.functional.scaled_dot_product_attention is original


def test_canary_falls_back_to_sdpa_for_an_unknown_signature():
    class Odd(torch.nn.Module):
        processor = object()
        heads, inner_dim, query_dim = 2, 32, 32

        def __init__(self):
            super().__init__()
            self.to_q = torch.nn.Linear(32, 32)

        def forward(self, a, b, c, d):  # not an attention signature the canary knows
            raise AssertionError("unreachable")

    result = attention_canary(Odd(), "cpu", torch.bfloat16)
    kind = result["kinds"][0]
    assert kind["kind"] == "sdpa" and "TypeError" in kind["fallback_reason"] and result["ok"]
    assert len(kind["cases"]) == 3
