"""families/sanavideo/kernels.py against the installed diffusers: the patched cross-attention inside a whole
SANA-Video block (per-token timesteps, RoPE, a padded caption mask) matches diffusers' block forward and backward;
the fingerprint; the points the family leaves on diffusers' code stay unpatched."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("triton")

from dit_lora.contract.capabilities import FusedKernels
from dit_lora.families.sanavideo import kernels as sv_kernels
from dit_lora.kernels import kernel_counts, patch_model
from dit_lora.kernels.patch_points import drift_note

POINTS = sv_kernels.patch_points()
HEADS, HEAD_DIM, FRAMES, HEIGHT, WIDTH, TEXT, BATCH = 2, 12, 2, 3, 4, 7, 2


def _block():
    from diffusers.models.transformers.transformer_sana_video import SanaVideoTransformerBlock

    torch.manual_seed(0)
    dim = HEADS * HEAD_DIM
    block = SanaVideoTransformerBlock(dim, HEADS, HEAD_DIM, num_cross_attention_heads=HEADS,
                                      cross_attention_head_dim=HEAD_DIM, cross_attention_dim=dim, mlp_ratio=3.0)
    with torch.no_grad():
        block.scale_shift_table.normal_(0, 0.5)
    return block.eval()


def _inputs():
    from diffusers.models.transformers.transformer_sana_video import WanRotaryPosEmbed

    gen = torch.Generator().manual_seed(1)
    dim, tokens = HEADS * HEAD_DIM, FRAMES * HEIGHT * WIDTH
    mask = torch.ones(BATCH, TEXT)
    mask[1, 3:] = 0
    rope = WanRotaryPosEmbed(HEAD_DIM, (1, 1, 1), 64)(torch.zeros(BATCH, 1, FRAMES, HEIGHT, WIDTH))
    hidden = torch.randn(BATCH, tokens, dim, generator=gen).requires_grad_(True)
    text = torch.randn(BATCH, TEXT, dim, generator=gen).requires_grad_(True)
    timestep = (torch.randn(BATCH, tokens, 6 * dim, generator=gen) * 0.5).requires_grad_(True)  # per token (I2V)
    return dict(hidden_states=hidden, encoder_hidden_states=text,
                encoder_attention_mask=((1 - mask) * -10000.0).unsqueeze(1), timestep=timestep,
                frames=FRAMES, height=HEIGHT, width=WIDTH, rotary_emb=rope)


def _run(block, inputs):
    out = block(**inputs)
    grads = torch.autograd.grad(out.square().sum(), [inputs[k] for k in ("hidden_states", "encoder_hidden_states",
                                                                         "timestep")])
    return out.detach(), grads


def test_patched_cross_attention_matches_diffusers_forward_and_backward():
    block = _block()
    fused = copy.deepcopy(block)
    patch_model(fused, POINTS, kernels="on", attention_backend="math")
    assert kernel_counts(fused)["attention"] == 1  # attn2 only: the linear self-attention stays diffusers'
    assert type(fused.attn1.processor).__name__ == "SanaLinearAttnProcessor3_0"
    assert type(fused.attn2.processor).__name__ == "SoftmaxAttentionProcessor"
    out, grads = _run(block, _inputs())
    fused_out, fused_grads = _run(fused, _inputs())
    torch.testing.assert_close(fused_out, out, rtol=1e-5, atol=1e-5)
    for a, b in zip(fused_grads, grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_wrong_mask_is_seen():
    """The comparison can fail: the same patched block with the caption mask dropped disagrees."""
    block = _block()
    fused = copy.deepcopy(block)
    patch_model(fused, POINTS, kernels="on", attention_backend="math")
    out, _ = _run(block, _inputs())
    assert not torch.allclose(_run(fused, {**_inputs(), "encoder_attention_mask": None})[0], out, atol=1e-4)


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
def test_fingerprint_matches_the_installed_diffusers(point):
    # Fails after a diffusers upgrade that changed the re-implemented source: re-check the test above, then record
    # the new fingerprint and version in families/sanavideo/kernels.py.
    assert drift_note(point) == ""


def test_the_family_declares_its_points():
    from dit_lora.registry import get_family

    fused = get_family("sanavideo").kernels
    assert isinstance(fused, FusedKernels) and tuple(fused.kernel_patch_points()) == POINTS
