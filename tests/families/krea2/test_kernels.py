"""Krea 2 and the fused kernels: no patch points of its own, and nothing for the generic points to patch (its norms
are its own class), so the model computes diffusers' own function, bit for bit. Its ``NO_GENERIC_KERNEL_PROBE``
(cases.py) points here."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("triton")

from diffusers.models.normalization import RMSNorm

from dit_lora.kernels import patch_model
from dit_lora.registry import get_family


def _run(model, call, inputs):
    model.zero_grad(set_to_none=True)
    out = call(model, inputs)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(2)))
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_krea2s_own_norms_are_left_as_diffusers_wrote_them():
    """Krea 2's norms are its own ``Krea2RMSNorm`` (a zero-centred scale kept in fp32), no library class: the generic
    points patch nothing and the model computes diffusers' own function, bit for bit (its guide says so)."""
    from dit_lora.families.krea2.demo import build_tiny_krea2_components
    from dit_lora.families.krea2.loss import position_ids

    assert get_family("krea2").kernels is None
    model = build_tiny_krea2_components()["transformer"].float()
    gen = torch.Generator().manual_seed(0)
    config = model.config
    inputs = {
        "hidden_states": torch.randn(2, 16, config.in_channels, generator=gen),
        "encoder_hidden_states": torch.randn(2, 6, config.num_text_layers, config.text_hidden_dim, generator=gen),
        "timestep": torch.tensor([0.3, 0.8]),
        "position_ids": position_ids(6, 4, 4, "cpu"),
        "encoder_attention_mask": torch.arange(6).expand(2, 6) < torch.tensor([[3], [6]]),
    }

    def call(m, kw):
        return m(**kw, return_dict=False)[0]

    ref_out, _ = _run(model, call, inputs)
    counts = patch_model(model, (), kernels="on", attention_backend="math")
    assert sum(counts[k] for k in ("layernorm", "rmsnorm", "modulate", "gated_residual")) == 0
    assert not any(type(m) in (nn.LayerNorm, nn.RMSNorm, RMSNorm) for m in model.modules())
    out, _ = _run(model, call, inputs)
    assert torch.equal(out, ref_out)
