"""Attention processors that route diffusers' attention through the kernel runtime.

They keep ``attn.to_q`` / ``to_k`` / ``to_v`` / ``to_out`` as separate calls, so PEFT's LoRA
layers inside them keep training (``fuse_qkv_projections`` would copy the weights into ``to_qkv``
and bypass the adapters). Masks go through ``attn.prepare_attention_mask`` exactly as diffusers'
own processors do. Each processor keeps the one it replaced (``original``) so unpatching, and
calls with features these do not implement, use diffusers' own code.
"""

from __future__ import annotations

import torch

from .monitor import KernelRuntime


def _heads_first(x: torch.Tensor, batch: int, heads: int) -> torch.Tensor:
    return x.view(batch, -1, heads, x.shape[-1] // heads).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, tokens, dim = x.shape
    return x.transpose(1, 2).reshape(batch, tokens, heads * dim)


def _mask(attn, mask: torch.Tensor | None, key_len: int, batch: int) -> torch.Tensor | None:
    if mask is None:
        return None
    mask = attn.prepare_attention_mask(mask, key_len, batch)
    return mask.view(batch, attn.heads, -1, mask.shape[-1])


class JointAttentionProcessor:
    """CogVideoX: text and video tokens attend jointly; RoPE on the video part; per-head q/k norms."""

    def __init__(self, runtime: KernelRuntime, original) -> None:
        self.runtime = runtime
        self.original = original

    def __call__(self, attn, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor,
                 attention_mask: torch.Tensor | None = None, image_rotary_emb=None):
        text_len = encoder_hidden_states.size(1)
        x = torch.cat([encoder_hidden_states, hidden_states], dim=1)
        batch, length, _ = x.shape
        mask = _mask(attn, attention_mask, length, batch)
        q = _heads_first(attn.to_q(x), batch, attn.heads)
        k = _heads_first(attn.to_k(x), batch, attn.heads)
        v = _heads_first(attn.to_v(x), batch, attn.heads)
        if attn.norm_q is not None:
            q = attn.norm_q(q)
        if attn.norm_k is not None:
            k = attn.norm_k(k)
        if image_rotary_emb is not None:
            from diffusers.models.embeddings import apply_rotary_emb

            # torch.cat rather than diffusers' in-place slice assignment: same values, no in-place op on a
            # tensor autograd may still need.
            q = torch.cat([q[:, :, :text_len], apply_rotary_emb(q[:, :, text_len:], image_rotary_emb)], dim=2)
            if not attn.is_cross_attention:
                k = torch.cat([k[:, :, :text_len], apply_rotary_emb(k[:, :, text_len:], image_rotary_emb)], dim=2)
        out = _merge_heads(self.runtime.attention(q, k, v, mask))
        out = attn.to_out[1](attn.to_out[0](out))
        encoder_out, out = out.split([text_len, length - text_len], dim=1)
        return out, encoder_out


class SoftmaxAttentionProcessor:
    """Self- or cross-attention with an optional key mask (Sana's cross-attention, DiT's self-attention).

    ``qk_norm_per_head`` mirrors where the replaced processor applies ``norm_q``/``norm_k``: per head
    (diffusers' ``AttnProcessor2_0``) or across heads before the split (``SanaAttnProcessor2_0``).
    """

    def __init__(self, runtime: KernelRuntime, original, qk_norm_per_head: bool) -> None:
        self.runtime = runtime
        self.original = original
        self.qk_norm_per_head = qk_norm_per_head

    def __call__(self, attn, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None, *args, **kwargs):
        if hidden_states.ndim != 3 or temb is not None or args or kwargs:
            extra = {"temb": temb} if temb is not None else {}
            return self.original(attn, hidden_states, encoder_hidden_states, attention_mask, *args, **extra, **kwargs)
        residual = hidden_states
        batch = hidden_states.shape[0]
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        if encoder_hidden_states is not None and getattr(attn, "norm_cross", None):
            context = attn.norm_encoder_hidden_states(context)
        mask = _mask(attn, attention_mask, context.shape[1], batch)
        q, k, v = attn.to_q(hidden_states), attn.to_k(context), attn.to_v(context)
        if not self.qk_norm_per_head:
            q = attn.norm_q(q) if attn.norm_q is not None else q
            k = attn.norm_k(k) if attn.norm_k is not None else k
        q, k, v = (_heads_first(t, batch, attn.heads) for t in (q, k, v))
        if self.qk_norm_per_head:
            q = attn.norm_q(q) if attn.norm_q is not None else q
            k = attn.norm_k(k) if attn.norm_k is not None else k
        out = _merge_heads(self.runtime.attention(q, k, v, mask)).to(q.dtype)
        out = attn.to_out[1](attn.to_out[0](out))
        if getattr(attn, "residual_connection", False):
            out = out + residual
        return out / attn.rescale_output_factor


class LinearAttentionProcessor:
    """Sana's ReLU linear self-attention through the fused kernel (fp32 inside, any input dtype)."""

    def __init__(self, runtime: KernelRuntime, original) -> None:
        self.runtime = runtime
        self.original = original

    def __call__(self, attn, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        original_dtype = hidden_states.dtype
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        q, k, v = attn.to_q(hidden_states), attn.to_k(context), attn.to_v(context)
        if attn.norm_q is not None:
            q = attn.norm_q(q)
        if attn.norm_k is not None:
            k = attn.norm_k(k)
        out = self.runtime.call("linear_attention", q, k, v, attn.heads)
        out = attn.to_out[1](attn.to_out[0](out.to(original_dtype)))
        if original_dtype == torch.float16:
            out = out.clip(-65504, 65504)
        return out
