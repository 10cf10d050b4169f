"""The attention canary: finite on the tiny model, catches a broken SDPA backend, falls back to math."""

from __future__ import annotations

import torch

from dit_lora.training.canary import (attention_canary, install_broken_attention, non_math_sdpa_enabled,
                                      sdpa_backend_flags)


def test_canary_is_finite_on_the_tiny_model(sana_model):
    model = sana_model()
    flags = sdpa_backend_flags()
    logged = []
    result = attention_canary(model, torch.device("cpu"), torch.bfloat16, logged.append)
    assert result["finite"] and result["ok"] and not result["fell_back"]
    assert {k["processor"] for k in result["kinds"]} == {"SanaLinearAttnProcessor2_0", "SanaAttnProcessor2_0"}
    assert all(k["kind"] == "module" for k in result["kinds"])
    assert sdpa_backend_flags() == flags
    assert logged == [result["message"]]
    assert not any(p.grad is not None for p in model.parameters())


def test_broken_attention_is_caught_and_math_fallback_trains_finite(sana_step):
    model, loss_fn, batch = sana_step
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


def test_canary_falls_back_to_sdpa_for_a_processor_needing_an_argument_it_does_not_pass():
    """SANA-Video's linear self-attention reads ``rotary_emb`` unconditionally (an UnboundLocalError without it):
    the canary probes such a module as plain SDPA instead of stopping the run."""

    class NeedsRope(torch.nn.Module):
        processor = object()
        heads, inner_dim, query_dim = 2, 32, 32

        def __init__(self):
            super().__init__()
            self.to_q = torch.nn.Linear(32, 32)

        def forward(self, hidden_states, encoder_hidden_states=None, rotary_emb=None):
            if rotary_emb is not None:
                rotated = hidden_states
            return rotated  # unbound without rotary_emb, as in diffusers' SanaLinearAttnProcessor3_0

    result = attention_canary(NeedsRope(), "cpu", torch.bfloat16)
    kind = result["kinds"][0]
    assert kind["kind"] == "sdpa" and "UnboundLocalError" in kind["fallback_reason"] and result["ok"]


def test_each_tested_module_is_placed_for_its_test(sana_model):
    """FSDP2 passes a placement (fsdp2.brought_in): the blocks wait in host memory until sharding, so only the
    module tested comes to the device, for its own test."""
    import contextlib

    model = sana_model()
    placed = []

    @contextlib.contextmanager
    def place(module):
        placed.append(module)
        yield

    result = attention_canary(model, torch.device("cpu"), torch.bfloat16, place=place)
    assert result["ok"] and len(placed) == len(result["kinds"]) == 2
    assert all(getattr(m, "processor", None) is not None for m in placed)


def test_on_a_cpu_a_wide_module_gets_fewer_tokens_and_a_narrow_one_all():
    """A CPU keeps the canary short: a module up to CPU_FULL_WIDTH wide gets 320 tokens, a wider one fewer (its
    projections cost tokens x width^2; a 5120-wide Wan block took 8 s at 320), never under 64 x 48; a GPU always gets
    the cuDNN failure pattern's lengths."""
    from diffusers.models.attention_processor import Attention

    from dit_lora.training.canary import CPU_FULL_WIDTH, _lengths

    wide = Attention(query_dim=2 * CPU_FULL_WIDTH, heads=16, dim_head=128)
    narrow = Attention(query_dim=64, heads=2, dim_head=32)
    for module, tokens in ((wide, "80 tokens"), (narrow, "320 tokens")):
        result = attention_canary(module, "cpu", torch.float32)  # fp32: no bf16 emulation on a CI core
        assert result["ok"] and result["kinds"][0]["cases"][0]["inputs"].startswith(tokens + ","), result
    assert _lengths(torch.device("cpu"), 5120) == (64, 48)
    assert _lengths(torch.device("cpu"), CPU_FULL_WIDTH) == _lengths(torch.device("cpu")) == (320, 192)
    assert _lengths(torch.device("cuda"), 5120) == (1088, 320)
