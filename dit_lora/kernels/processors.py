"""Attention processors that route diffusers' attention through the kernel runtime.

They keep ``attn.to_q`` / ``to_k`` / ``to_v`` / ``to_out`` as separate calls, so PEFT's LoRA
layers inside them keep training (``fuse_qkv_projections`` would copy the weights into ``to_qkv``
and bypass the adapters). Masks go through ``attn.prepare_attention_mask`` exactly as diffusers'
own processors do. Each processor keeps the one it replaced (``original``) so unpatching, and
calls with features these do not implement, use diffusers' own code. Which diffusers processor each
replaces is declared by the patch points (the families' own, and the generic ones in :mod:`.patch`);
a family with a processor of its own shape keeps it in its ``kernels.py`` and builds it from
:func:`heads_first`, :func:`merge_heads` and :func:`key_mask`.
"""

from __future__ import annotations

import torch

from dit_lora.kernels.monitor import KernelRuntime


def heads_first(x: torch.Tensor, batch: int, heads: int) -> torch.Tensor:
    """(B, N, H*D) -> (B, H, N, D)."""
    return x.view(batch, -1, heads, x.shape[-1] // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, N, D) -> (B, N, H*D)."""
    batch, heads, tokens, dim = x.shape
    return x.transpose(1, 2).reshape(batch, tokens, heads * dim)


def key_mask(attn, mask: torch.Tensor | None, key_len: int, batch: int) -> torch.Tensor | None:
    """A diffusers attention mask as (B, H, 1 or N, key_len), prepared exactly as diffusers' processors do."""
    if mask is None:
        return None
    mask = attn.prepare_attention_mask(mask, key_len, batch)
    return mask.view(batch, attn.heads, -1, mask.shape[-1])


class SoftmaxAttentionProcessor:
    """Self- or cross-attention with an optional key mask.

    ``qk_norm_per_head`` mirrors where the replaced processor applies ``norm_q``/``norm_k``: per head
    (diffusers' ``AttnProcessor2_0``) or across heads before the split (e.g. some models' own processors).
    """

    def __init__(self, runtime: KernelRuntime, original, qk_norm_per_head: bool) -> None:
        self.runtime = runtime
        self.original = original
        self.qk_norm_per_head = qk_norm_per_head

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        temb: torch.Tensor | None = None,
        *args,
        **kwargs,
    ):
        if hidden_states.ndim != 3 or temb is not None or args or kwargs:
            extra = {"temb": temb} if temb is not None else {}
            return self.original(attn, hidden_states, encoder_hidden_states, attention_mask, *args, **extra, **kwargs)
        residual = hidden_states
        batch = hidden_states.shape[0]
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        if encoder_hidden_states is not None and getattr(attn, "norm_cross", None):
            context = attn.norm_encoder_hidden_states(context)
        mask = key_mask(attn, attention_mask, context.shape[1], batch)
        q, k, v = attn.to_q(hidden_states), attn.to_k(context), attn.to_v(context)
        if not self.qk_norm_per_head:
            q = attn.norm_q(q) if attn.norm_q is not None else q
            k = attn.norm_k(k) if attn.norm_k is not None else k
        q, k, v = (heads_first(t, batch, attn.heads) for t in (q, k, v))
        if self.qk_norm_per_head:
            q = attn.norm_q(q) if attn.norm_q is not None else q
            k = attn.norm_k(k) if attn.norm_k is not None else k
        out = merge_heads(self.runtime.attention(q, k, v, mask)).to(q.dtype)
        out = attn.to_out[1](attn.to_out[0](out))
        if getattr(attn, "residual_connection", False):
            out = out + residual
        return out / attn.rescale_output_factor


class LinearAttentionProcessor:
    """ReLU linear self-attention (q, k, v projections, optional q/k norms) through the fused kernel.

    fp32 inside, any input dtype; a float16 output is clipped to float16's range as diffusers' linear
    attention processor does.
    """

    def __init__(self, runtime: KernelRuntime, original) -> None:
        self.runtime = runtime
        self.original = original

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
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
