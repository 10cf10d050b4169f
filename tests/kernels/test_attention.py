"""Attention backends: every one matches the reference, masks per sample, and says what cannot run here."""

from __future__ import annotations

import sys

import pytest
import torch

from dit_lora.kernels.attention import (ATTENTION_BACKENDS, attention, attention_reference, fallback_backend,
                                        resolve_backend)


def _qkv(batch=3, heads=2, q_len=37, kv_len=37, dim=16, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, n, dim, generator=gen).to(dtype) for n in (q_len, kv_len, kv_len)]


@pytest.mark.parametrize("requested", ATTENTION_BACKENDS)
def test_every_backend_matches_the_reference_with_a_per_sample_mask(requested):
    backend = resolve_backend(requested, "cpu")
    q, k, v = _qkv(q_len=20, kv_len=11)
    mask = torch.zeros(3, 1, 1, 11)
    mask[1, ..., 7:] = -10000.0  # sample 1 has 7 valid keys, sample 2 has 3
    mask[2, ..., 3:] = -10000.0
    for t in (q, k, v):
        t.requires_grad_(True)
    out = attention(q, k, v, mask, backend)
    ref = attention_reference(q, k, v, mask)
    assert torch.allclose(out, ref, atol=1e-5)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-5)
    assert torch.all(grads[1][2, :, 3:] == 0)  # masked keys of sample 2 get no gradient


def test_backend_resolution_explains_what_cannot_run_here():
    assert resolve_backend("auto", "cpu").name == "sdpa"
    cudnn = resolve_backend("cudnn", "cpu")
    assert cudnn.name == "sdpa" and "CUDA" in cudnn.note
    flash = resolve_backend("flash", "cpu", allow_flashattn=False)
    assert flash.name == "flash" and "--disable_flashattn" in flash.note
    assert resolve_backend("math", "cpu").sdpa_order is not None
    assert fallback_backend(resolve_backend("flash", "cpu"), "cpu").name == "math"
    with pytest.raises(ValueError, match="auto, flash, cudnn"):
        resolve_backend("xformers", "cpu")


def test_flash_attn_3_is_preferred_over_2_when_both_are_installed(monkeypatch):
    import types

    from dit_lora.kernels.attention import find_flash_attn

    fa2, fa3 = types.ModuleType("flash_attn"), types.ModuleType("flash_attn_interface")
    fa2.flash_attn_func = lambda *a, **k: "fa2"
    fa3.flash_attn_func = lambda *a, **k: "fa3"
    monkeypatch.setitem(sys.modules, "flash_attn", fa2)
    assert find_flash_attn()[0] == "flash_attn_2"
    monkeypatch.setitem(sys.modules, "flash_attn_interface", fa3)
    name, fn = find_flash_attn()
    assert name == "flash_attn_3" and fn() == "fa3"
    # On a CPU the package is never chosen, whatever is installed.
    assert resolve_backend("flash", "cpu").flash_fn is None


@pytest.mark.gpu
@pytest.mark.parametrize("requested", ["auto", "flash", "cudnn", "efficient", "sdpa", "math"])
def test_cuda_backends_match_the_reference_forward_and_backward(requested):
    backend = resolve_backend(requested, "cuda")
    q, k, v = (t.cuda().requires_grad_() for t in _qkv(batch=2, heads=4, q_len=1088, kv_len=1088, dim=64,
                                                         dtype=torch.bfloat16))
    out = attention(q, k, v, None, backend)
    ref = attention_reference(q, k, v)
    assert torch.isfinite(out).all() and (out.float() - ref.float()).abs().max() < 2e-2
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        assert torch.isfinite(a).all() and (a.float() - b.float()).abs().max() < 5e-2 * b.float().abs().max()
