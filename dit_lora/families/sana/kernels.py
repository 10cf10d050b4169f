"""Sana's fused-kernel patch points: its adaLN-single block, its cross-attention and its ReLU linear attention.

The block forward re-implements diffusers' ``SanaTransformerBlock.forward`` with the fused
modulate and gated-residual ops; the processors are the generic ones of
:mod:`dit_lora.kernels.processors`, configured for Sana's (q/k norms across heads, before the
split). Each point records the fingerprint of the diffusers source it was written for
(:mod:`dit_lora.kernels.patch_points`); ``tests/families/sana/test_kernels.py`` runs the block
against the installed diffusers one.
"""

from __future__ import annotations

import functools

from torch import nn

from dit_lora.kernels.monitor import KernelRuntime
from dit_lora.kernels.patch_points import PatchPoint
from dit_lora.kernels.processors import LinearAttentionProcessor, SoftmaxAttentionProcessor
from dit_lora.kit.patch_table import PatchTable

#: its points, on code taken from diffusers 0.42.1
SANA = PatchTable("sana", "diffusers 0.42.1")


def block_forward(
    self,
    rt: KernelRuntime,
    hidden_states,
    attention_mask=None,
    encoder_hidden_states=None,
    encoder_attention_mask=None,
    timestep=None,
    height=None,
    width=None,
):
    """``SanaTransformerBlock.forward`` with LayerNorm + modulation and the gated residual adds fused."""
    batch = hidden_states.shape[0]
    # (B, 6, D) -> six per-sample (B, D) rows, the layout every op takes
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (
        self.scale_shift_table[None] + timestep.reshape(batch, 6, -1)
    ).unbind(dim=1)
    n1, n2 = self.norm1, self.norm2
    norm_x = rt.call("modulate", hidden_states, n1.weight, n1.bias, scale_msa, shift_msa, n1.eps)
    hidden_states = rt.call("gated_residual", hidden_states, gate_msa, self.attn1(norm_x.to(hidden_states.dtype)))
    if self.attn2 is not None:
        hidden_states = (
            self.attn2(
                hidden_states, encoder_hidden_states=encoder_hidden_states, attention_mask=encoder_attention_mask
            )
            + hidden_states
        )
    norm_x = rt.call("modulate", hidden_states, n2.weight, n2.bias, scale_mlp, shift_mlp, n2.eps)
    ff = self.ff(norm_x.unflatten(1, (height, width)).permute(0, 3, 1, 2)).flatten(2, 3).permute(0, 2, 1)
    return rt.call("gated_residual", hidden_states, gate_mlp, ff)


def cross_attention(rt: KernelRuntime, original) -> SoftmaxAttentionProcessor:
    """Sana's softmax cross-attention processor: q/k norms applied across heads, before the split."""
    return SoftmaxAttentionProcessor(rt, original, qk_norm_per_head=False)


def _is_block(m: nn.Module) -> bool:
    return hasattr(m, "norm2") and type(m.norm1) is nn.LayerNorm and type(m.norm2) is nn.LayerNorm


@functools.cache
def patch_points() -> tuple[PatchPoint, ...]:
    """Sana's points: ``SanaTransformerBlock``, ``SanaAttnProcessor2_0``, ``SanaLinearAttnProcessor2_0``."""
    from diffusers.models.attention_processor import SanaLinearAttnProcessor2_0
    from diffusers.models.transformers.sana_transformer import SanaAttnProcessor2_0, SanaTransformerBlock

    return (
        SANA.forward(
            "block", SanaTransformerBlock, "modulate gated_residual", "5afe258c4b26a5f0", block_forward, _is_block
        ),
        SANA.processor("cross_attention", SanaAttnProcessor2_0, "attention", "8ef70e80b2143f99", cross_attention),
        SANA.processor(
            "linear_attention",
            SanaLinearAttnProcessor2_0,
            "linear_attention",
            "2f931a190ca42ed2",
            LinearAttentionProcessor,
        ),
    )
