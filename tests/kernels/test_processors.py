"""`kernels/processors.py`: the softmax processor computes what diffusers' own `AttnProcessor2_0` does (masks, cross
attention, per-head q/k norms, batch > 1), hands calls it does not implement back to the original, and the head
reshapes round-trip."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from diffusers.models.attention_processor import Attention, AttnProcessor2_0

from dit_lora.kernels.processors import SoftmaxAttentionProcessor, heads_first, merge_heads


class _SdpaRuntime:
    """The kernel runtime's attention as plain SDPA: the processor's own plumbing is what is under test."""

    def attention(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_heads_first_and_merge_heads_round_trip_odd_shapes():
    x = torch.randn(3, 7, 5 * 6)
    split = heads_first(x, 3, 5)
    assert split.shape == (3, 5, 7, 6)
    assert torch.equal(split[1, 2, 4], x[1, 4, 12:18])
    assert torch.equal(merge_heads(split), x)


@pytest.mark.parametrize("qk_norm", [None, "rms_norm"])
@pytest.mark.parametrize("cross", [False, True])
def test_softmax_processor_matches_diffusers_forward_and_backward(qk_norm, cross):
    torch.manual_seed(0)
    attn = Attention(query_dim=24, cross_attention_dim=16 if cross else None, heads=3, dim_head=8, qk_norm=qk_norm,
                     bias=True, processor=AttnProcessor2_0())
    hidden = torch.randn(3, 11, 24, requires_grad=True)
    context = torch.randn(3, 5, 16, requires_grad=True) if cross else None
    mask = torch.ones(3, 5 if cross else 11, dtype=torch.bool)
    mask[1, -2:] = False  # one sample with padded keys

    def run(processor):
        attn.set_processor(processor)
        out = attn(hidden, encoder_hidden_states=context, attention_mask=mask.float().log().clamp(min=-1e4)[:, None])
        grads = torch.autograd.grad(out.square().sum(), [hidden, *(p for p in attn.parameters())])
        return out.detach(), grads

    ref_out, ref_grads = run(AttnProcessor2_0())
    out, grads = run(SoftmaxAttentionProcessor(_SdpaRuntime(), AttnProcessor2_0(), qk_norm_per_head=True))
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_calls_it_does_not_implement_go_to_the_original():
    calls = []

    def original(attn, hidden, context, mask, *args, **kwargs):
        calls.append(kwargs)
        return hidden

    processor = SoftmaxAttentionProcessor(_SdpaRuntime(), original, qk_norm_per_head=True)
    image_like = torch.randn(2, 4, 3, 3)  # 4-D input: diffusers' processor reshapes it, this one does not
    assert processor(None, image_like) is image_like
    temb = torch.randn(2, 8)
    hidden = torch.randn(2, 5, 8)
    assert processor(None, hidden, temb=temb) is hidden and calls[-1]["temb"] is temb
