"""CogVideoX's fused-kernel patch points: its adaLN-zero norms, its block's gated residuals, its joint attention.

Each forward below re-implements a diffusers one with the fused ops (through the model's
:class:`~dit_lora.kernels.monitor.KernelRuntime`); each point records the fingerprint of the
diffusers source it was written for, so an upgraded diffusers whose forward changed leaves that
block on diffusers' own code (:mod:`dit_lora.kernels.patch_points`).
``tests/families/cogvideox/test_kernels.py`` runs each against the installed diffusers block.
"""

from __future__ import annotations

import functools
from typing import cast

import torch
from torch import nn

from dit_lora.kernels.monitor import KernelRuntime
from dit_lora.kernels.patch_points import PatchPoint
from dit_lora.kernels.processors import heads_first, key_mask, merge_heads
from dit_lora.kit.patch_table import PatchTable, RuntimeProcessor

#: its points, on code taken from diffusers 0.42.1
COGVIDEOX = PatchTable("cogvideox", "diffusers 0.42.1")


def norm_zero_forward(self, rt: KernelRuntime, hidden_states, encoder_hidden_states, temb):
    """``CogVideoXLayerNormZero.forward`` with the LayerNorm + modulation of both streams fused."""
    shift, scale, gate, enc_shift, enc_scale, enc_gate = self.linear(self.silu(temb)).chunk(6, dim=1)
    n = self.norm
    hidden_states = rt.call("modulate", hidden_states, n.weight, n.bias, scale, shift, n.eps)
    encoder_hidden_states = rt.call("modulate", encoder_hidden_states, n.weight, n.bias, enc_scale, enc_shift, n.eps)
    return hidden_states, encoder_hidden_states, gate[:, None, :], enc_gate[:, None, :]


def block_forward(
    self, rt: KernelRuntime, hidden_states, encoder_hidden_states, temb, image_rotary_emb=None, attention_kwargs=None
):
    """``CogVideoXBlock.forward`` with its four gated residual adds fused."""
    text_len = encoder_hidden_states.size(1)
    norm_x, norm_ctx, gate_x, gate_ctx = self.norm1(hidden_states, encoder_hidden_states, temb)
    attn_x, attn_ctx = self.attn1(
        hidden_states=norm_x,
        encoder_hidden_states=norm_ctx,
        image_rotary_emb=image_rotary_emb,
        **(attention_kwargs or {}),
    )
    hidden_states = rt.call("gated_residual", hidden_states, gate_x, attn_x)
    encoder_hidden_states = rt.call("gated_residual", encoder_hidden_states, gate_ctx, attn_ctx)
    norm_x, norm_ctx, gate_x, gate_ctx = self.norm2(hidden_states, encoder_hidden_states, temb)
    ff = self.ff(torch.cat([norm_ctx, norm_x], dim=1))
    hidden_states = rt.call("gated_residual", hidden_states, gate_x, ff[:, text_len:])
    encoder_hidden_states = rt.call("gated_residual", encoder_hidden_states, gate_ctx, ff[:, :text_len])
    return hidden_states, encoder_hidden_states


def _rotate(x: torch.Tensor, image_rotary_emb) -> torch.Tensor:
    """diffusers' ``apply_rotary_emb`` on ``x``: annotated as returning a (query, key) pair, it returns ``x`` rotated."""
    from diffusers.models.embeddings import apply_rotary_emb

    return cast(torch.Tensor, apply_rotary_emb(x, image_rotary_emb))


class JointAttentionProcessor(RuntimeProcessor):
    """``CogVideoXAttnProcessor2_0`` on the runtime: text and video tokens attend jointly, RoPE on the video part."""

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        image_rotary_emb=None,
    ):
        text_len = encoder_hidden_states.size(1)
        x = torch.cat([encoder_hidden_states, hidden_states], dim=1)
        batch, length, _ = x.shape
        mask = key_mask(attn, attention_mask, length, batch)
        q = heads_first(attn.to_q(x), batch, attn.heads)
        k = heads_first(attn.to_k(x), batch, attn.heads)
        v = heads_first(attn.to_v(x), batch, attn.heads)
        if attn.norm_q is not None:
            q = attn.norm_q(q)
        if attn.norm_k is not None:
            k = attn.norm_k(k)
        if image_rotary_emb is not None:
            # torch.cat rather than diffusers' in-place slice assignment: same values, no in-place op on a
            # tensor autograd may still need.
            q = torch.cat([q[:, :, :text_len], _rotate(q[:, :, text_len:], image_rotary_emb)], dim=2)
            if not attn.is_cross_attention:
                k = torch.cat([k[:, :, :text_len], _rotate(k[:, :, text_len:], image_rotary_emb)], dim=2)
        out = merge_heads(self.runtime.attention(q, k, v, mask))
        out = attn.to_out[1](attn.to_out[0](out))
        encoder_out, out = out.split([text_len, length - text_len], dim=1)
        return out, encoder_out


def _layer_norm(m: nn.Module) -> bool:
    return type(m.norm) is nn.LayerNorm


@functools.cache
def patch_points() -> tuple[PatchPoint, ...]:
    """CogVideoX's points: ``CogVideoXLayerNormZero``, ``CogVideoXBlock``, ``CogVideoXAttnProcessor2_0``."""
    from diffusers.models.attention_processor import CogVideoXAttnProcessor2_0
    from diffusers.models.normalization import CogVideoXLayerNormZero
    from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXBlock

    return (
        COGVIDEOX.forward(
            "norm_zero", CogVideoXLayerNormZero, "modulate", "7a8c5e8c95048878", norm_zero_forward, _layer_norm
        ),
        COGVIDEOX.forward("block", CogVideoXBlock, "gated_residual", "7d76aaa4a943237d", block_forward),
        COGVIDEOX.processor(
            "attention", CogVideoXAttnProcessor2_0, "attention", "d1aa6498c53047fc", JointAttentionProcessor
        ),
    )
