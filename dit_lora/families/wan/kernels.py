"""Wan's fused-kernel patch points: its block's modulations and gated residuals and its attention.

Each forward below re-implements a diffusers (or torch) one with the fused ops, called through the model's
:class:`~dit_lora.kernels.monitor.KernelRuntime`; each point records the fingerprint of the source it was
written for, so an upgrade that changes it leaves that module on the library's own code
(:mod:`dit_lora.kernels.patch_points`). ``tests/families/wan/test_kernels.py`` runs each against the installed
diffusers block, forward and backward, fp32 and bf16.

Where Wan uses an op dit-lora has (diffusers 0.42.1, ``models/transformers/transformer_wan.py``):

- ``WanTransformerBlock.forward``: ``(norm1(h.float()) * (1 + scale) + shift).type_as(h)`` with ``norm1`` and
  ``norm3`` ``FP32LayerNorm(elementwise_affine=False)`` and the modulation in fp32 (``scale_shift_table +
  temb.float()``) is the fused ``modulate`` op on fp32 rows (the kernel upcasts ``h`` as ``h.float()`` does and
  promotes the output to fp32; the ``type_as`` stays). ``(h.float() + out * gate).type_as(h)`` is the fused
  ``gated_residual`` (fp32 gate: the sum is fp32, rounded once by the ``type_as``). The cross-attention's
  ``norm2`` and plain residual stay diffusers' code. Wan 2.2 TI2V's per-token 4-D ``temb`` (batch, tokens, 6,
  dim) is not what the ops take (one modulation row per sample): that call runs diffusers' own forward.
- ``norm_q`` / ``norm_k`` (and the I2V ``norm_added_k``) are ``torch.nn.RMSNorm`` over heads * head_dim: the
  generic ``torch_rmsnorm`` point of :mod:`dit_lora.kernels.patch` patches the module itself (not the processor,
  so each norm is patched once and is switchable with the others under ``--disable_layernorm_kernel``).
- ``WanAttnProcessor``: attention through the runtime's backend (:class:`WanAttentionProcessor`); RoPE and the
  I2V image branch keep diffusers' math.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from dit_lora.kernels.monitor import KernelRuntime
from dit_lora.kernels.patch_points import PatchPoint
from dit_lora.kernels.processors import merge_heads
from dit_lora.kit.patch_table import PatchTable, RuntimeProcessor

#: its points, on code taken from diffusers 0.42.1
WAN = PatchTable("wan", "diffusers 0.42.1")
# WanAttnProcessor: "512 is the context length of the text encoder, hardcoded for now" (I2V: image tokens first).
TEXT_CONTEXT = 512


def _modulate(
    rt: KernelRuntime, norm: nn.Module, x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor
) -> torch.Tensor:
    """``(norm(x.float()) * (1 + scale) + shift).type_as(x)`` for an ``FP32LayerNorm`` without affine.

    ``scale``/``shift`` are fp32 ``(B, D)``. The fused kernel reads ``x`` and upcasts it in registers, the
    same values ``x.float()`` gives, so it takes ``x`` as it is (no fp32 copy). The PyTorch reference (an op
    the sampled check switched off, or any call under ``torch.compile``: :meth:`KernelRuntime.call`) runs
    ``layer_norm`` in the dtype it is given, so it gets ``x.float()`` to stay diffusers' fp32 LayerNorm.
    """
    fused = rt.enabled.get("modulate", False) and not torch.compiler.is_compiling()
    return rt.call("modulate", x if fused else x.float(), None, None, scale, shift, norm.eps).type_as(x)


def block_forward(self, rt: KernelRuntime, hidden_states, encoder_hidden_states, temb, rotary_emb):
    """``WanTransformerBlock.forward`` with its two modulations and two gated residual adds fused.

    A 4-D ``temb`` (Wan 2.2 TI2V: one modulation per token) runs diffusers' own forward.
    """
    if temb.ndim == 4:
        return type(self).forward(self, hidden_states, encoder_hidden_states, temb, rotary_emb)
    # (B, 6, D) fp32 -> six (B, D) rows, the layout the ops take (diffusers keeps (B, 1, D))
    shift_msa, scale_msa, gate_msa, c_shift_msa, c_scale_msa, c_gate_msa = (
        self.scale_shift_table + temb.float()
    ).unbind(dim=1)

    # 1. Self-attention
    norm_hidden_states = _modulate(rt, self.norm1, hidden_states, scale_msa, shift_msa)
    attn_output = self.attn1(norm_hidden_states, None, None, rotary_emb)
    hidden_states = rt.call("gated_residual", hidden_states, gate_msa, attn_output).type_as(hidden_states)

    # 2. Cross-attention (diffusers' code: an affine FP32LayerNorm or Identity, and a plain residual)
    norm_hidden_states = self.norm2(hidden_states.float()).type_as(hidden_states)
    attn_output = self.attn2(norm_hidden_states, encoder_hidden_states, None, None)
    hidden_states = hidden_states + attn_output

    # 3. Feed-forward
    norm_hidden_states = _modulate(rt, self.norm3, hidden_states, c_scale_msa, c_shift_msa)
    ff_output = self.ffn(norm_hidden_states)
    return rt.call("gated_residual", hidden_states, c_gate_msa, ff_output).type_as(hidden_states)


def _rotary(x: torch.Tensor, freqs_cos: torch.Tensor, freqs_sin: torch.Tensor) -> torch.Tensor:
    """WanAttnProcessor's ``apply_rotary_emb`` on (B, N, H, D): the same products and one rounding to x's dtype.

    ``torch.stack`` of the even/odd results instead of diffusers' slice assignment into ``empty_like``: the
    same values (each fp32 result rounded once to x's dtype), no in-place writes.
    """
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    cos = freqs_cos[..., 0::2]
    sin = freqs_sin[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2).type_as(x)


class WanAttentionProcessor(RuntimeProcessor):
    """``WanAttnProcessor`` on the runtime: self- or cross-attention, RoPE, the I2V image keys and values.

    Keeps ``to_q`` / ``to_k`` / ``to_v`` / ``add_k_proj`` / ``add_v_proj`` as separate calls (LoRA layers in them
    keep training) and calls ``norm_q`` / ``norm_k`` / ``norm_added_k`` as modules (patched by
    the generic ``torch_rmsnorm`` point when the RMSNorm op is on). What it does not implement goes to diffusers' own
    processor: fused projections, an attention mask (Wan's blocks pass none), context parallelism, extra kwargs.
    """

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        rotary_emb=None,
        **kwargs,
    ) -> torch.Tensor:
        if (
            kwargs
            or attention_mask is not None
            or getattr(attn, "fused_projections", False)
            or getattr(self.original, "_parallel_config", None) is not None
        ):
            return self.original(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb, **kwargs)
        image = None
        if attn.add_k_proj is not None:
            # only a block's cross-attention (attn2) has add_k_proj, and the block always gives it the context
            assert encoder_hidden_states is not None
            split = encoder_hidden_states.shape[1] - TEXT_CONTEXT
            image, encoder_hidden_states = encoder_hidden_states[:, :split], encoder_hidden_states[:, split:]
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        query = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (attn.heads, -1))
        key = attn.norm_k(attn.to_k(context)).unflatten(2, (attn.heads, -1))
        value = attn.to_v(context).unflatten(2, (attn.heads, -1))
        if rotary_emb is not None:
            query, key = _rotary(query, *rotary_emb), _rotary(key, *rotary_emb)
        out = self._attend(query, key, value)
        if image is not None:
            key_img = attn.norm_added_k(attn.add_k_proj(image)).unflatten(2, (attn.heads, -1))
            value_img = attn.add_v_proj(image).unflatten(2, (attn.heads, -1))
            # diffusers computes the image branch first; the order of two independent attentions changes nothing
            out = out + self._attend(query, key_img, value_img)
        return attn.to_out[1](attn.to_out[0](out))

    def _attend(self, query, key, value) -> torch.Tensor:
        """(B, N, H, D) q, k, v -> (B, N, H*D) in q's dtype, on the run's attention backend."""
        out = self.runtime.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), None)
        return merge_heads(out).type_as(query)


def _is_block(m: nn.Module) -> bool:
    # The fused modulate here passes no LayerNorm weight or bias: norm1/norm3 must have none (diffusers builds
    # them with elementwise_affine=False).
    from diffusers.models.normalization import FP32LayerNorm

    return all(
        type(n) is FP32LayerNorm and n.weight is None and n.bias is None and len(n.normalized_shape) == 1
        for n in (m.norm1, m.norm3)
    )


@functools.cache
def patch_points() -> tuple[PatchPoint, ...]:
    """Wan's points: ``WanTransformerBlock`` and ``WanAttnProcessor`` (its q/k ``torch.nn.RMSNorm``: a generic point)."""
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor, WanTransformerBlock

    return (
        WAN.forward(
            "block", WanTransformerBlock, "modulate gated_residual", "6f82f5be8f58923d", block_forward, _is_block
        ),
        WAN.processor("attention", WanAttnProcessor, "attention", "f20ffcc85b9b0e6b", WanAttentionProcessor),
    )
